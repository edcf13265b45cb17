/** Every error thrown by this package carries a stable machine-readable `code`. */
export type TensorOpsErrorCode =
  | "UNKNOWN_TYPE"
  | "UNSUPPORTED_TYPE"
  | "BAD_BYTE_LENGTH"
  | "UNALIGNED_BLOCKS"
  | "BAD_SHAPE"
  | "BAD_ARGUMENT";

export class TensorOpsError extends Error {
  readonly code: TensorOpsErrorCode;
  constructor(code: TensorOpsErrorCode, message: string) {
    super(message);
    this.name = "TensorOpsError";
    this.code = code;
  }
}

/** The number is not a ggml type this package knows about. */
export class UnknownTypeError extends TensorOpsError {
  readonly type: number;
  constructor(type: number) {
    super("UNKNOWN_TYPE", `unknown ggml type ${String(type)}`);
    this.name = "UnknownTypeError";
    this.type = type;
  }
}

/** A known ggml type that the requested operation cannot handle (e.g. dequantizing I32). */
export class UnsupportedTypeError extends TensorOpsError {
  readonly type: number;
  readonly typeName: string;
  constructor(type: number, typeName: string, operation: string) {
    super("UNSUPPORTED_TYPE", `${operation} does not support ggml type ${typeName} (${type})`);
    this.name = "UnsupportedTypeError";
    this.type = type;
    this.typeName = typeName;
  }
}

/** The byte length does not match what the shape and type require. */
export class ByteLengthError extends TensorOpsError {
  readonly expected: number;
  readonly actual: number;
  constructor(what: string, expected: number, actual: number) {
    super("BAD_BYTE_LENGTH", `${what}: expected ${expected} bytes, got ${actual}`);
    this.name = "ByteLengthError";
    this.expected = expected;
    this.actual = actual;
  }
}

/** An element count or row length is not a whole number of quantization blocks. */
export class BlockAlignmentError extends TensorOpsError {
  constructor(typeName: string, count: number, blockSize: number) {
    super("UNALIGNED_BLOCKS", `${typeName}: ${count} elements is not a multiple of the block size ${blockSize}`);
    this.name = "BlockAlignmentError";
  }
}

export class ShapeError extends TensorOpsError {
  constructor(message: string) {
    super("BAD_SHAPE", message);
    this.name = "ShapeError";
  }
}

export class ArgumentError extends TensorOpsError {
  constructor(message: string) {
    super("BAD_ARGUMENT", message);
    this.name = "ArgumentError";
  }
}
