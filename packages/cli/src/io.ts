import { fstatSync, writeSync } from "node:fs";
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

/**
 * The process's own output: each write goes straight to fd 1 or 2 with writeSync. Creating
 * process.stdout on a pipe loads net and the stream modules, about 2 ms of a 25 ms command,
 * and Node writes pipes and files synchronously on Linux anyway, so output order is the same.
 */
export const processIo: CliIo = {
  out: (t) => writeOrExit(1, t),
  err: (t) => writeOrExit(2, t),
  env: process.env,
  get outTTY() {
    return isTerminal(1);
  },
  get errTTY() {
    return isTerminal(2);
  },
  get columns() {
    return isTerminal(2) ? process.stderr.columns : undefined;
  },
};

/** A terminal is a character device: fstat rules pipes and files out without loading node:tty (and net). */
function isTerminal(fd: 1 | 2): boolean {
  try {
    return fstatSync(fd).isCharacterDevice() && process.getBuiltinModule("node:tty").isatty(fd);
  } catch {
    return false;
  }
}

/**
 * Write all of `text`. A closed pipe (`| head`) ends the command quietly (exit 0); any other
 * failure to write standard output is one line on stderr and exit 1.
 */
function writeOrExit(fd: 1 | 2, text: string): void {
  const bytes = Buffer.from(text, "utf8");
  let at = 0;
  while (at < bytes.length) {
    try {
      at += writeSync(fd, bytes, at);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "EAGAIN") {
        // a non-blocking pipe that is full: give its reader a moment
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
        continue;
      }
      if (code !== "EPIPE" && fd === 1) {
        try {
          writeSync(2, `ollama-compat: cannot write to standard output: ${code ?? (e as Error).message}\n`);
        } catch {
          // stderr is gone too
        }
      }
      process.exit(code === "EPIPE" ? 0 : 1);
    }
  }
}

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
