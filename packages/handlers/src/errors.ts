/** Machine-readable reasons a translation failed. */
export type TranslationErrorCode =
  /** A rename would take a name another tensor has. */
  | "TENSOR_CLASH"
  /** An op names an input tensor the draft does not have. */
  | "OP_INPUT_MISSING"
  /** An op creates a tensor without giving its type and shape. */
  | "OP_SHAPE"
  /** An op produced another byte count than its type and shape need. */
  | "OP_LENGTH"
  /** A reshape needs more bytes than the tensor's source range holds. */
  | "RESHAPE_GROWS"
  /** A Q/K tensor's rows do not split into the given heads. */
  | "QK_HEADS"
  /** A translation profile name nobody knows. */
  | "UNKNOWN_PROFILE"
  /** A count in the metadata that the tensors present contradict (a damaged or hostile header). */
  | "BAD_COUNT"
  /** Tensors a transform joins have types it cannot join under the chosen profile. */
  | "MIXED_TYPES"
  /** An op's kernel could not take its input (a type it has no path for, rows that are not whole blocks). */
  | "OP_FAILED"
  /** A reshape or an op's output would give a block-quantized tensor rows that are not whole blocks. */
  | "ROWS_NOT_BLOCKS";

/** A translation could not be carried out (bad source layout, a failed op, a missing input). */
export class TranslationError extends Error {
  readonly code: TranslationErrorCode;
  /** The handler that was running, when known. */
  readonly handler: string | undefined;
  /** The tensor concerned, when there is one. */
  readonly tensor: string | undefined;

  constructor(code: TranslationErrorCode, message: string, opts: { handler?: string; tensor?: string; cause?: unknown } = {}) {
    super(message, opts.cause !== undefined ? { cause: opts.cause } : undefined);
    this.name = "TranslationError";
    this.code = code;
    this.handler = opts.handler;
    this.tensor = opts.tensor;
  }
}
