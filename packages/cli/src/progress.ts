import type { CliIo } from "./io";
import { humanBytes } from "./format";

export interface ProgressBar {
  /** Bytes written so far of total. */
  update(written: number, total: number): void;
  /** Ends the bar's line (no-op when nothing was drawn). */
  done(): void;
}

const NONE: ProgressBar = { update() {}, done() {} };

function clock(seconds: number): string {
  if (!Number.isFinite(seconds)) return "--:--";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const mm = String(Math.floor((s % 3600) / 60)).padStart(2, "0");
  const ss = String(s % 60).padStart(2, "0");
  return h > 0 ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}

/**
 * A one-line progress bar on stderr (label, bar, percent, bytes, rate, ETA), redrawn with
 * `\r` at most every 100 ms. Only on a terminal and not with --quiet: piped stderr stays clean.
 */
export function progressBar(io: CliIo, label: string, opts: { quiet?: boolean; now?: () => number } = {}): ProgressBar {
  if (opts.quiet || io.errTTY !== true) return NONE;
  const now = opts.now ?? (() => performance.now());
  const start = now();
  let last = -Infinity;
  let drawn = false;
  const draw = (written: number, total: number) => {
    const elapsed = (now() - start) / 1000;
    const rate = elapsed > 0 ? written / elapsed : 0;
    const eta = rate > 0 ? (total - written) / rate : Infinity;
    const frac = total > 0 ? Math.min(1, written / total) : 1;
    const tail = ` ${String(Math.floor(frac * 100)).padStart(3)}% ${humanBytes(written)}/${humanBytes(total)} ${humanBytes(Math.round(rate))}/s ETA ${clock(eta)}`;
    const width = Math.max(10, Math.min(40, (io.columns ?? 80) - label.length - tail.length - 4));
    const fill = Math.round(frac * width);
    io.err(`\r${label} [${"#".repeat(fill)}${"-".repeat(width - fill)}]${tail}\x1b[K`);
    drawn = true;
  };
  return {
    update(written, total) {
      const t = now();
      if (written < total && t - last < 100) return;
      last = t;
      draw(written, total);
    },
    done() {
      if (drawn) io.err("\n");
      drawn = false;
    },
  };
}

/** Files smaller than this are written too fast for progress lines in a log to tell anything. */
const LOG_MIN_BYTES = 16 * 2 ** 20;

/**
 * Progress of the bridge's cache writes (one file after another: the text GGUF, then the
 * mmproj). On a terminal, the bar `translate` draws, one per file. Elsewhere (a log, a
 * pipe) one line per tenth of a file of at least 16 MiB, each at most once: the writer
 * reports every chunk, and lines that repeat the same rounded figure tell a log reader nothing.
 */
export function cacheProgress(io: CliIo, opts: { quiet?: boolean } = {}): (e: { file: string; kind: string; written: number; total: number }) => void {
  let current = "";
  let bar: ProgressBar = NONE;
  let tenths = -1;
  let finished = false;
  return (e) => {
    if (opts.quiet) return;
    const id = `${e.kind}\0${e.file}\0${e.total}`;
    if (id !== current) {
      bar.done();
      current = id;
      bar = progressBar(io, `caching ${e.kind}`);
      tenths = -1;
      finished = false;
    }
    if (finished) return;
    finished = e.written >= e.total;
    if (io.errTTY === true) {
      bar.update(e.written, e.total);
      if (finished) bar.done();
      return;
    }
    if (e.total < LOG_MIN_BYTES) return;
    const reached = Math.floor((10 * e.written) / e.total);
    if (reached <= tenths) return;
    tenths = reached;
    const mib = (n: number) => (n / 2 ** 20).toFixed(1);
    io.err(`ollama-compat: writing ${e.kind} ${mib(e.written)} / ${mib(e.total)} MiB (${reached * 10}%)\n`);
  };
}
