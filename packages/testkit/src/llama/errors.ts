export type LlamaHarnessErrorCode = "TOOLS_UNAVAILABLE" | "SERVER_START_FAILED" | "SERVER_REQUEST_FAILED";

/** A harness failure (not a llama.cpp verdict on a model: those are results, not throws). */
export class LlamaHarnessError extends Error {
  override readonly name = "LlamaHarnessError";
  constructor(
    readonly code: LlamaHarnessErrorCode,
    message: string,
  ) {
    super(message);
  }
}
