export type TestkitErrorCode =
  /** No llama.cpp tools: LLAMA_BIN lacks them, or building them failed. */
  | "TOOLS_UNAVAILABLE"
  | "SERVER_START_FAILED"
  | "SERVER_REQUEST_FAILED"
  /** No fixture (or variant) of that name. */
  | "NO_FIXTURE"
  /** Fixture options or a fixture definition that cannot be built (bad seed, counts, names). */
  | "BAD_FIXTURE"
  /** The host lacks a CPU feature of the suite's baseline (CPU_BASELINE), or the prebuilt lacks its variant. */
  | "CPU_BASELINE_UNSUPPORTED"
  /** node-llama-cpp loaded another CPU variant than the pinned one. */
  | "CPU_VARIANT_NOT_PINNED"
  /** The testkit's own package directory could not be found. */
  | "NO_PACKAGE_ROOT";

/** Every failure the testkit raises on purpose (not a llama.cpp verdict on a model: those are results, not throws). */
export class TestkitError extends Error {
  override readonly name = "TestkitError";
  constructor(
    readonly code: TestkitErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** @deprecated the testkit has one error class, TestkitError. */
export const LlamaHarnessError = TestkitError;
/** @deprecated see TestkitError. */
export type LlamaHarnessError = TestkitError;
/** @deprecated see TestkitErrorCode. */
export type LlamaHarnessErrorCode = TestkitErrorCode;
