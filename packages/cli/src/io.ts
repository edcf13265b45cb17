/** Where the command writes: process streams in the binary, buffers in tests. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  env: Record<string, string | undefined>;
  /** stdout / stderr are terminals: colour and the progress bar depend on it. */
  outTTY?: boolean;
  errTTY?: boolean;
  /** Terminal width, for the progress bar. */
  columns?: number;
}

export const processIo: CliIo = {
  out: (t) => process.stdout.write(t),
  err: (t) => process.stderr.write(t),
  env: process.env,
  get outTTY() {
    return process.stdout.isTTY === true;
  },
  get errTTY() {
    return process.stderr.isTTY === true;
  },
  get columns() {
    return process.stderr.columns;
  },
};

/**
 * Exit codes: 0 ok, 1 error, 2 usage, 3 not supported (an Ollama-format file this
 * version has no handler for: `detect`, `translate`, `verify` and `export` end with it).
 */
export const ExitCode = { ok: 0, error: 1, usage: 2, notSupported: 3 } as const;

/** Colour only on a terminal and never with NO_COLOR set (https://no-color.org). */
export function paint(io: CliIo, stream: "out" | "err"): (code: number, text: string) => string {
  const on = (stream === "out" ? io.outTTY : io.errTTY) === true && !io.env.NO_COLOR;
  return (code, text) => (on ? `\x1b[${code}m${text}\x1b[0m` : text);
}
