import { Command, CommanderError, Option } from "commander";
import { TRANSLATION_PROFILES } from "@compat/handlers";
import { detectCommand } from "./commands/detect";
import { inspectCommand } from "./commands/inspect";
import { translateCommand } from "./commands/translate";
import { CliError } from "./errors";
import { ExitCode, processIo, type CliIo } from "./io";

declare const __CLI_VERSION__: string | undefined;
const VERSION = typeof __CLI_VERSION__ === "string" ? __CLI_VERSION__ : "0.0.0-dev";

/** --profile, on every command that translates. */
function profileOption(): Option {
  return new Option("--profile <profile>", "native: also fix the reference's known gaps (listed in the report); reference: reproduce Ollama's compat layer exactly")
    .choices(TRANSLATION_PROFILES)
    .default("native");
}

function buildProgram(io: CliIo): Command {
  const program = new Command("ollama-compat")
    .description("Make Ollama-published GGUFs load in stock llama.cpp")
    .version(VERSION)
    .exitOverride()
    .configureOutput({ writeOut: io.out, writeErr: io.err })
    .showHelpAfterError("(run ollama-compat --help for usage)");

  program
    .command("translate")
    .description("write the llama.cpp-loadable text GGUF for an Ollama GGUF (the source is never modified)")
    .argument("<in>", "the Ollama GGUF (a blob or a .gguf file)")
    .option("-o, --output <out>", "where to write the translated GGUF (atomically)")
    .option("--dry-run", "print what would change, write nothing")
    .option("--json", "print machine-readable output")
    .addOption(profileOption())
    .action((file: string, opts) => translateCommand(file, opts, io));

  program
    .command("detect")
    .description("name the handler that would translate FILE and the Ollama markers it found")
    .argument("<file>")
    .option("--json", "print machine-readable output")
    .addOption(profileOption())
    .action((file: string, opts) => detectCommand(file, opts, io));

  program
    .command("inspect")
    .description("list a GGUF's metadata (with GGUF types) and tensors (dtype, shape)")
    .argument("<file>")
    .option("--json", "print machine-readable output")
    .action((file: string, opts) => inspectCommand(file, opts, io));

  return program;
}

/** Runs the command line; returns the exit code (0 ok, 1 error, 2 usage). Never throws. */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv as string[], { from: "user" });
    return ExitCode.ok;
  } catch (e) {
    if (e instanceof CommanderError) {
      // help and version end here too, successfully
      return e.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
    }
    if (e instanceof CliError) {
      io.err(`ollama-compat: ${e.message}\n`);
      return e.kind === "usage" ? ExitCode.usage : ExitCode.error;
    }
    io.err(`ollama-compat: ${oneLine(e)}\n`);
    return ExitCode.error;
  }
}

/** One line, no stack: the typed errors' messages already name file, offset and expectation. */
function oneLine(e: unknown): string {
  if (e instanceof Error) {
    const code = (e as { code?: unknown }).code;
    const prefix = typeof code === "string" && !e.message.includes(code) ? `${code}: ` : "";
    return prefix + e.message.split("\n")[0];
  }
  return String(e);
}
