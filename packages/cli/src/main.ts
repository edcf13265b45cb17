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

  runCli(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
