/** Machine-readable reasons a GGUF operation failed. */
export type GgufErrorCode =
  | "BAD_MAGIC"
  | "UNSUPPORTED_VERSION"
  | "TRUNCATED"
  | "COUNT_TOO_LARGE"
  | "STRING_TOO_LONG"
  | "INVALID_UTF8"
  | "BAD_VALUE_TYPE"
  | "BAD_GGML_TYPE"
  | "BAD_SHAPE"
  | "SHAPE_OVERFLOW"
  | "TENSOR_OFFSET"
  | "DUPLICATE_KEY"
  | "DUPLICATE_TENSOR"
  | "EMPTY_KEY"
  | "BAD_ALIGNMENT"
  | "KV_TYPE"
  | "KV_MISSING"
  | "TENSOR_MISSING"
  | "BAD_VALUE"
  | "DATA_LENGTH"
  | "NOT_ARRIVED"
  | "IO";

export interface GgufErrorDetails {
  /** Absolute byte offset in the file where the problem was found. */
  offset?: number;
  /** File name, "<buffer>", or Blob name. */
  source?: string;
  /** What the reader expected to find instead. */
  expected?: string;
  cause?: unknown;
}

/** Every failure this package raises on purpose is a GgufError with a stable `code`. */
export class GgufError extends Error {
  override readonly name = "GgufError";
  readonly code: GgufErrorCode;
  readonly offset?: number;
  readonly source?: string;
  readonly expected?: string;

  constructor(code: GgufErrorCode, message: string, details: GgufErrorDetails = {}) {
    super(formatMessage(message, details), details.cause === undefined ? undefined : { cause: details.cause });
    this.code = code;
    if (details.offset !== undefined) this.offset = details.offset;
    if (details.source !== undefined) this.source = details.source;
    if (details.expected !== undefined) this.expected = details.expected;
  }
}

function formatMessage(message: string, d: GgufErrorDetails): string {
  const where: string[] = [];
  if (d.source !== undefined) where.push(d.source);
  if (d.offset !== undefined) where.push(`offset ${d.offset}`);
  const prefix = where.length > 0 ? `${where.join(" @ ")}: ` : "";
  const suffix = d.expected !== undefined ? ` (expected ${d.expected})` : "";
  return `${prefix}${message}${suffix}`;
}
