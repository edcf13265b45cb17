import { unlinkSync } from "node:fs";
import { constants } from "node:os";
import { pendingTempFiles } from "@compat/gguf";
import { runCli } from "./cli";

/** The command line's own entry (dist/cli.cjs, loaded by bin.cjs); runCli is exported for the build's code-cache warm-up. */
export { runCli };

/** Runs the command on process.argv: signal cleanup, quiet EPIPE, the exit code. */
export function main(): void {
  // A signal must not leave a half-written hidden temp file behind: remove what the
  // atomic writer has in progress, then die of the same signal's exit status.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.once(signal, () => {
      for (const tmp of pendingTempFiles()) {
        try {
          unlinkSync(tmp);
        } catch {
          // already gone
        }
      }
      process.exit(128 + (constants.signals[signal] ?? 1));
    });
  }

  // A closed pipe (`| head`) ends the command quietly; a full or broken stdout is one line on stderr.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (e: NodeJS.ErrnoException) => {
      if (e.code !== "EPIPE" && stream === process.stdout) {
        process.stderr.write(`ollama-compat: cannot write to standard output: ${e.code ?? e.message}\n`);
      }
      process.exit(e.code === "EPIPE" ? 0 : 1);
    });
  }

  runCli(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
