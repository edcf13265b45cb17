/** Everything the bridge can refuse, each with a stable `code` for programs and a message for people. */
export type BridgeErrorCode =
  | "UNKNOWN_MODEL" // a model the router was asked for is not among those it serves
  | "UNSUPPORTED_MODEL" // a model cannot be served (e.g. a router model without a GGUF model layer)
  | "TRANSLATION_ABORTED" // stopped (signal) before llama-server started
  | "LLAMA_SERVER_NOT_FOUND"
  | "PORT_IN_USE"
  | "INSECURE_BIND" // a non-loopback host without an API key or an explicit opt-out
  | "BAD_ARGUMENT" // a llama-server argument the bridge cannot honour (a unix-socket --host, TLS files, an empty --api-key-file)
  | "INVALID_OPTION" // an option out of its range (models-max, keep-alive)
  | "SERVER_START_FAILED" // llama-server exited before it was healthy
  | "SERVER_CRASHED" // llama-server was killed by a signal of its own (SIGSEGV, SIGILL, ...) before it was healthy
  | "SERVER_START_TIMEOUT"; // llama-server did not become healthy in time

export class BridgeError extends Error {
  constructor(
    readonly code: BridgeErrorCode,
    message: string,
    /** Extra facts: the reference, file, exit code, last log lines… */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = "BridgeError";
  }
}
