import { unlinkSync } from "node:fs";
import { constants } from "node:os";
import { pendingTempFiles } from "@compat/files";
import { runCli } from "./cli";

/** The command line's own entry (dist/cli.cjs, loaded by bin.cjs); runCli is exported for the build's code-cache warm-up. */
export { runCli };

/** Runs the command on process.argv: temp-file cleanup on signals and early exits, the exit code. */
export function main(): void {
  // Neither a signal nor a failed write to stdout (which exits at once, src/io.ts) may leave
  // a half-written hidden temp file behind: remove what the atomic writer has in progress.
  process.once("exit", () => {
    for (const tmp of pendingTempFiles()) {
      try {
        unlinkSync(tmp);
      } catch {
        // already gone
      }
    }
  });
  // Die of the same signal's exit status.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.once(signal, () => process.exit(128 + (constants.signals[signal] ?? 1)));
  }

  const argv = process.argv.slice(2);
  runCli(argv).then((code) => {
    // translate's outputs are fsynced and renamed, and its every line written (writeSync), by
    // the time runCli settles: exit at once instead of waiting for Node's teardown (about 20 ms
    // of freeing the heap and joining threads after the last rename). The "exit" handler above
    // still runs. serve likewise: llama-server has exited, its preset folder is removed and the
    // mount closed when it returns; what is left are reads of a start it cut short (a signal
    // while the store was read), which Node would otherwise wait for. Other commands end as
    // Node ends them.
    if (argv[0] === "translate" || argv[0] === "serve") process.exit(code);
    process.exitCode = code;
  });
}
