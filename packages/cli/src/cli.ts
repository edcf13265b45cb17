import { Command, CommanderError, Option } from "commander";
import { TRANSLATION_PROFILES } from "@compat/handlers";
import { detectCommand } from "./commands/detect";
import { inspectCommand } from "./commands/inspect";
import { lsCommand } from "./commands/ls";
import { serveCommand } from "./commands/serve";
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

function buildProgram(io: CliIo, result: { code: number }): Command {
  const program = new Command("ollama-compat")
    .description("Make Ollama-published GGUFs load in stock llama.cpp")
    .version(VERSION)
    .exitOverride()
    .configureOutput({ writeOut: io.out, writeErr: io.err })
    .showHelpAfterError("(run ollama-compat --help for usage)");

  program
    .command("translate")
    .description(
      "write the llama.cpp-loadable text GGUF for an Ollama GGUF, and its vision/audio projector as an mmproj GGUF when it embeds one (the source is never modified)",
    )
    .argument("<in>", "the Ollama GGUF (a blob or a .gguf file)")
    .option("-o, --output <out>", "where to write the translated GGUF (atomically)")
    .option("--mmproj <file>", "where to write the projector (default: mmproj-<name of OUT> beside OUT)")
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

  program
    .command("serve")
    .description("serve an Ollama model (or every installed one, --all) with llama-server; prints the URL")
    .argument("[model]", "an Ollama reference (gemma3:4b, namespace/model:tag) or a GGUF path")
    .argument("[llama-server-args...]", "after --: passed to llama-server verbatim")
    .option("--all", "every installed model behind one endpoint (llama-server router mode), picked by name per request")
    .option("--host <host>", "address to bind", "127.0.0.1")
    .option("--port <port>", "port to bind (default: a free one)")
    .option("--llama-server <path>", "llama-server binary (default: $LLAMA_SERVER, PATH, the tools build cache)")
    .option("--rpc <servers>", "llama.cpp RPC workers, host:port,...")
    .option("--models <dir>", "the Ollama model store (default: $OLLAMA_MODELS or ~/.ollama/models)")
    .option("--cache-dir <dir>", "where translated files are cached")
    .option("--start-timeout <seconds>", "how long to wait for llama-server to be ready", "600")
    .addOption(profileOption())
    .action(async (model: string | undefined, rest: string[], opts) => {
      result.code = await serveCommand(model, rest, opts, io);
    });

  program
    .command("ls")
    .description("installed Ollama models: size, architecture, and native / translatable / cached / not supported")
    .option("--models <dir>", "the Ollama model store (default: $OLLAMA_MODELS or ~/.ollama/models)")
    .option("--cache-dir <dir>", "where translated files are cached")
    .addOption(profileOption())
    .option("--json", "print machine-readable output")
    .action((opts) => lsCommand(opts, io));

  return program;
}

/** Runs the command line; returns the exit code (0 ok, 1 error, 2 usage). Never throws. */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  const result = { code: ExitCode.ok as number };
  const program = buildProgram(io, result);
  try {
    await program.parseAsync(argv as string[], { from: "user" });
    return result.code;
  } catch (e) {
    if (e instanceof CommanderError) {
      // help and version end here too, successfully
      return e.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
    }
    if (e instanceof CliError) {
      io.err(`ollama-compat: ${e.message}\n`);
      return e.code === "usage" ? ExitCode.usage : ExitCode.error;
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
