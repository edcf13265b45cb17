/** "usage": the command line is wrong (exit 2); "error": the command failed (exit 1);
 * "not-supported": an Ollama-format file this version cannot translate (exit 3). */
export type CliErrorCode = "usage" | "error" | "not-supported";

/** An error the CLI reports in one line; `usage` ones exit with 2, `not-supported` ones with 3. */
export class CliError extends Error {
  override readonly name = "CliError";
  constructor(
    readonly code: CliErrorCode,
    message: string,
  ) {
    super(message);
  }
}
