/** An error the CLI reports in one line; `usage` ones exit with 2. */
export class CliError extends Error {
  constructor(
    readonly kind: "usage" | "error",
    message: string,
  ) {
    super(message);
    this.name = "CliError";
  }
}
