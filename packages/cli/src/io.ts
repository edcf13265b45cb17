/** Where the command writes: process streams in the binary, buffers in tests. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  env: Record<string, string | undefined>;
}

export const processIo: CliIo = {
  out: (t) => process.stdout.write(t),
  err: (t) => process.stderr.write(t),
  env: process.env,
};

/** Exit codes: 0 ok, 1 error, 2 usage. */
export const ExitCode = { ok: 0, error: 1, usage: 2 } as const;
