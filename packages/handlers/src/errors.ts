/** A translation could not be carried out (bad source layout, a failed op, a missing input). */
export class TranslationError extends Error {
  readonly code: string;
  /** The handler that was running, when known. */
  readonly handler: string | undefined;
  /** The tensor concerned, when there is one. */
  readonly tensor: string | undefined;

  constructor(code: string, message: string, opts: { handler?: string; tensor?: string; cause?: unknown } = {}) {
    super(message, opts.cause !== undefined ? { cause: opts.cause } : undefined);
    this.name = "TranslationError";
    this.code = code;
    this.handler = opts.handler;
    this.tensor = opts.tensor;
  }
}
