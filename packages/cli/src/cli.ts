import { Command, CommanderError, Option } from "commander";
import { CliError } from "./errors";
import { jsonText, terminalSafe } from "./terminal";
import { ExitCode, processIo, type CliIo } from "./io";

declare const __CLI_VERSION__: string | undefined;
const VERSION = typeof __CLI_VERSION__ === "string" ? __CLI_VERSION__ : "0.0.0-dev";

/** @compat/handlers' TRANSLATION_PROFILES, spelled out so `--help` does not load the handlers (a test keeps them equal). */
export const PROFILES = ["native", "reference"] as const;

/** --profile, on every command that translates. */
function profileOption(): Option {
  return new Option("--profile <profile>", "native: also fix the reference's known gaps (listed in the report); reference: reproduce Ollama's compat layer exactly")
    .choices(PROFILES)
    .default("native");
}

const ENV_HELP: Record<string, string> = {
  OLLAMA_MODELS: "the Ollama model store for MODEL references (default ~/.ollama/models)",
  OLLAMA_LLAMA_CPP_COMPAT: "0 turns every translation off (files are used as they are)",
  LLAMA_SERVER: "the llama-server binary (else PATH, $LLAMA_BIN, the tools build cache)",
  OLLAMA_COMPAT_CACHE: "ollama-compat's cache folder, as --cache-dir: translations in translated/ (default ~/.cache/ollama-compat)",
  OLLAMA_COMPAT_CACHE_MAX_BYTES: "evict least-recently-used translations beyond this size (default 64 GiB)",
  LLAMA_API_KEY: "the API key clients must send (as --api-key-file; lets --host go beyond loopback)",
  NO_COLOR: "set: no colour even on a terminal",
  OLLAMA_HOST: "serve --all: the address to answer on, as Ollama reads it (default 127.0.0.1:11434)",
  OLLAMA_ORIGINS: "serve --all: extra origins browsers may call from (comma-separated, * wildcards), as Ollama's",
  OLLAMA_KEEP_ALIVE: "serve --all: how long an idle model stays loaded (default 5m)",
  OLLAMA_MAX_LOADED_MODELS: "serve --all: models loaded at once (default 4)",
};

/** --cache-dir, on every command that uses the translation cache: the same folder as $OLLAMA_COMPAT_CACHE. */
const CACHE_DIR_HELP = "ollama-compat's cache folder, the same as $OLLAMA_COMPAT_CACHE: translations are kept in DIR/translated (default ~/.cache/ollama-compat)";

const EXIT_HELP = "Exit codes: 0 ok, 1 error, 2 usage, 3 not supported (an Ollama-format file this version has no handler for).";

/** The text after a command's options: examples, exit codes, the environment it reads. */
function footer(examples: string[], env: Array<keyof typeof ENV_HELP>, exits = EXIT_HELP): string {
  const lines = ["", "Examples:", ...examples.map((e) => `  $ ${e}`), "", exits];
  if (env.length > 0) lines.push("", "Environment:", ...env.map((k) => `  ${k.padEnd(30)}${ENV_HELP[k]}`));
  return lines.join("\n") + "\n";
}

/** Each command's module is imported only when it runs, so `--help` and `inspect` start fast. */
const commands = {
  translate: () => import("./commands/translate"),
  detect: () => import("./commands/detect"),
  inspect: () => import("./commands/inspect"),
  diff: () => import("./commands/diff"),
  ls: () => import("./commands/ls"),
  pull: () => import("./commands/pull"),
  serve: () => import("./commands/serve"),
  exportModels: () => import("./commands/export"),
  mount: () => import("./commands/mount"),
  verify: () => import("./commands/verify"),
  migrate: () => import("./commands/migrate"),
  demo: () => import("./commands/demo"),
};

function buildProgram(argv: readonly string[], io: CliIo, result: { code: number }): Command {
  const dashDash = argv.indexOf("--");
  const program = new Command("ollama-compat")
    .description("Make Ollama-published GGUFs load in stock llama.cpp")
    .version(VERSION)
    .option("--debug", "print stack traces with errors")
    .exitOverride()
    // usage errors are reported by runCli, as one prefixed line
    .configureOutput({ writeOut: io.out, writeErr: io.err, outputError: () => {} })
    .addHelpText(
      "after",
      footer(
        ["ollama-compat demo", "ollama-compat detect gemma3:4b", "ollama-compat translate gemma3:4b -o gemma3.gguf", "ollama-compat serve gemma3:4b", "ollama-compat <command> --help"],
        ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT", "LLAMA_SERVER", "NO_COLOR"],
      ),
    );
  const set = (code: number | void) => {
    if (typeof code === "number") result.code = code;
  };

  program
    .command("translate")
    .description(
      "write the llama.cpp-loadable text GGUF for an Ollama GGUF, and its vision/audio projector as an mmproj GGUF when it embeds one (the source is never modified)",
    )
    .argument("<in>", "the Ollama GGUF (a blob, a .gguf file, or a model reference such as gemma3:4b)")
    .option("-o, --output <out>", "where to write the translated GGUF (atomically; not an existing directory)")
    .option("--mmproj <file>", "where to write the projector (default: mmproj-<name of OUT> beside OUT)")
    .option("--dry-run", "print what would change, write nothing")
    .option("--json", "print machine-readable output")
    .option("-q, --quiet", "no progress bar (it is shown only when stderr is a terminal)")
    .addOption(profileOption())
    .addHelpText(
      "after",
      footer(
        [
          "ollama-compat translate ~/.ollama/models/blobs/sha256-… -o model.gguf",
          "ollama-compat translate gemma3:4b -o gemma3.gguf --mmproj mmproj-gemma3.gguf",
          "ollama-compat translate gemma3:4b --dry-run --json",
        ],
        ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT", "NO_COLOR"],
      ),
    )
    .action(async (file: string, opts) => set(await (await commands.translate()).translateCommand(file, opts, io)));

  program
    .command("detect")
    .description("say whether FILE is llama.cpp-native, Ollama-format and supported (which handlers, which markers), or Ollama-format but not supported")
    .argument("<file>", "a GGUF file or a model reference")
    .option("--json", "print machine-readable output")
    .addOption(profileOption())
    .addHelpText(
      "after",
      footer(
        ["ollama-compat detect gemma3:4b", "ollama-compat detect model.gguf --json"],
        ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT", "NO_COLOR"],
        "Exit codes: 0 native (nothing to do) or Ollama-format and supported, 1 error, 2 usage,\n3 Ollama-format but not supported by this version.",
      ),
    )
    .action(async (file: string, opts) => set(await (await commands.detect()).detectCommand(file, opts, io)));

  program
    .command("inspect")
    .description("list a GGUF's metadata (with GGUF types) and tensors (dtype, shape, bytes); long arrays abbreviated unless --full")
    .argument("<file>", "a GGUF file or a model reference")
    .option("--json", "print machine-readable output")
    .option("--full", "every array item, every string in full")
    .addHelpText("after", footer(["ollama-compat inspect model.gguf", "ollama-compat inspect gemma3:4b --json --full"], ["OLLAMA_MODELS", "NO_COLOR"]))
    .action(async (file: string, opts) => set(await (await commands.inspect()).inspectCommand(file, opts, io)));

  program
    .command("diff")
    .description("the KV and tensor differences between two GGUFs (e.g. a translation and its native twin)")
    .argument("<a>", "a GGUF file or a model reference")
    .argument("<b>", "a GGUF file or a model reference")
    .option("--json", "print machine-readable output")
    .addHelpText(
      "after",
      footer(["ollama-compat diff translated.gguf native.gguf", "ollama-compat diff a.gguf b.gguf --json"], ["OLLAMA_MODELS", "NO_COLOR"], "Exit codes: 0 the files differ or not (see the output), 1 error, 2 usage."),
    )
    .action(async (a: string, b: string, opts) => set(await (await commands.diff()).diffCommand(a, b, opts, io)));

  program
    .command("serve")
    .description("serve an Ollama model with llama-server: an OpenAI-compatible API (/v1/chat/completions, /v1/embeddings, /v1/models) at the URL it prints; or every installed one on Ollama's API (--all)")
    .argument("[model]", "an Ollama reference (gemma3:4b, namespace/model:tag) or a GGUF path")
    .argument("[llama-server-args...]", "after --: passed to llama-server verbatim")
    .option("--all", "every installed model on Ollama's REST API (and OpenAI's /v1), on Ollama's address: llama-server's router behind it, models picked by name per request")
    .option("--host <host>", "address to bind (default 127.0.0.1; with --all, OLLAMA_HOST's); beyond loopback only with --api-key-file (or LLAMA_API_KEY) or --insecure")
    .option("--api-key-file <file>", "file holding the API key clients must send (passed to llama-server by environment, not argv)")
    .option("--insecure", "allow serving beyond loopback without an API key")
    .option("--port <port>", "port to bind (default: a free one; with --all, OLLAMA_HOST's or 11434)")
    .option("--models-max <n>", "with --all: models loaded at once, least recently used unloaded first (default $OLLAMA_MAX_LOADED_MODELS or 4; 0: no limit)")
    .option("--keep-alive <duration>", "with --all: how long an idle model stays loaded, e.g. 5m, 1h, -1 for ever (default $OLLAMA_KEEP_ALIVE or 5m)")
    .option("--llama-server <path>", "llama-server binary (default: $LLAMA_SERVER, PATH, the tools build cache)")
    .option("--rpc <servers>", "llama.cpp RPC workers, host:port,...")
    .option("--models <dir>", "the Ollama model store (default: $OLLAMA_MODELS or ~/.ollama/models)")
    .option("--cache-dir <dir>", CACHE_DIR_HELP)
    .option("--no-mount", "serve from the translation cache even where a FUSE mount of the store could be used (the default when FUSE is usable)")
    .option("--start-timeout <seconds>", "how long to wait for llama-server to be ready", "600")
    .addOption(profileOption())
    .addHelpText(
      "after",
      footer(
        [
          "ollama-compat serve gemma3:4b",
          "ollama-compat serve gemma3:4b --port 8080 -- -c 8192",
          "curl http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}'",
          "ollama-compat serve --all -- --threads 4",
          "OLLAMA_HOST=0.0.0.0:11434 ollama-compat serve --all --api-key-file ~/.ollama-compat-key",
        ],
        [
          "OLLAMA_MODELS",
          "OLLAMA_LLAMA_CPP_COMPAT",
          "LLAMA_SERVER",
          "LLAMA_API_KEY",
          "OLLAMA_COMPAT_CACHE",
          "OLLAMA_COMPAT_CACHE_MAX_BYTES",
          "OLLAMA_HOST",
          "OLLAMA_ORIGINS",
          "OLLAMA_KEEP_ALIVE",
          "OLLAMA_MAX_LOADED_MODELS",
        ],
        "Exit codes: 1 llama-server failed or exited (its last lines are shown), 2 usage, 130/143 stopped by SIGINT/SIGTERM.",
      ),
    )
    .action(async (model: string | undefined, rest: string[], opts) => {
      // commander drops `--` and hands what follows it in as operands: MODEL is the first
      // word before it, if any (`serve --all -- --threads 2` has none)
      const words = [...(model === undefined ? [] : [model]), ...rest];
      const after = dashDash >= 0 ? argv.length - dashDash - 1 : 0;
      const before = words.slice(0, words.length - after);
      set(await (await commands.serve()).serveCommand(before[0], [...before.slice(1), ...words.slice(words.length - after)], opts, io));
    });

  program
    .command("ls")
    .description("installed Ollama models: size, architecture, and native / translatable / cached / not-supported")
    .option("--models <dir>", "the Ollama model store (default: $OLLAMA_MODELS or ~/.ollama/models)")
    .option("--cache-dir <dir>", CACHE_DIR_HELP)
    .addOption(profileOption())
    .option("--json", "print machine-readable output")
    .addHelpText("after", footer(["ollama-compat ls", "ollama-compat ls --json"], ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT", "OLLAMA_COMPAT_CACHE"]))
    .action(async (opts) => set(await (await commands.ls()).lsCommand(opts, io)));

  program
    .command("pull")
    .description("download a model from Ollama's library (registry.ollama.ai) or any OCI registry into the Ollama store, as `ollama pull` does: resumable, every layer checked against its digest")
    .argument("<model>", "model[:tag], namespace/model:tag, or host[:port]/namespace/model:tag")
    .option("--insecure", "plain HTTP to the registry (a local registry without TLS)")
    .option("--models <dir>", "the Ollama model store to pull into (default: $OLLAMA_MODELS or ~/.ollama/models)")
    .option("--to <dir>", "instead of the store: straight into llama.cpp's layout in this folder, translated while it downloads (the files and configuration export writes)")
    .addOption(
      new Option("--layout <layout>", "with --to: models-dir (models.ini for llama-server --models-preset), llama-swap (llama-swap.yaml) or lmstudio").choices(["models-dir", "llama-swap", "lmstudio"]),
    )
    .option("--force", "with --to: replace files in DIR that export or pull did not make (never a folder)")
    .option("--llama-server <path>", "with --to --layout llama-swap: the llama-server its configuration runs")
    .addOption(profileOption())
    .option("--json", "print Ollama's progress objects ({status, digest, total, completed}), one per line")
    .option("-q, --quiet", "no progress")
    .addHelpText(
      "after",
      footer(
        ["ollama-compat pull gemma3:4b", "ollama-compat pull localhost:5000/library/tiny:1 --insecure", "ollama-compat pull gemma3:4b --json", "ollama-compat pull gemma3:4b --to ~/llama-models && llama-server --models-preset ~/llama-models/models.ini"],
        ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT"],
        "Exit codes: 0 pulled, 1 error (no network, no such model, a layer whose digest does not match: nothing of it is kept), 2 usage, 3 (--to) Ollama-format but not supported by this version.\nAn interrupted pull into the store continues where it stopped when run again; one with --to leaves no file under a final name and starts over.",
      ),
    )
    .action(async (model: string, opts) => set(await (await commands.pull()).pullCommand(model, opts, io)));

  program
    .command("export")
    .description(
      "lay out installed models (text GGUF + mmproj) for other llama.cpp front ends, with the configuration that serves each as serve does: llama-server --models-preset, llama-swap, or LM Studio",
    )
    .argument("[models...]", "Ollama references (default: every installed model)")
    .requiredOption("--to <dir>", "the folder to fill (created if missing)")
    .addOption(
      new Option(
        "--layout <layout>",
        "models-dir: the files for llama-server --models-dir and a models.ini for its --models-preset; llama-swap: the same files and a llama-swap.yaml; lmstudio: publisher/model/file.gguf",
      )
        .choices(["models-dir", "llama-swap", "lmstudio"])
        .default("models-dir"),
    )
    .option("--copy", "plain copies of translated files instead of links to the cache (native files are always linked)")
    .option("--force", "replace files and links in DIR that export did not make (never a folder)")
    .option("--llama-server <path>", "the llama-server llama-swap's configuration runs (default: the one serve would use, else llama-server on PATH)")
    .option("--models <dir>", "the Ollama model store (default: $OLLAMA_MODELS or ~/.ollama/models)")
    .option("--cache-dir <dir>", CACHE_DIR_HELP)
    .option("--json", "print machine-readable output")
    .option("-q, --quiet", "no progress bar")
    .addOption(profileOption())
    .addHelpText(
      "after",
      footer(
        [
          "ollama-compat export --to ~/llama-models && llama-server --models-preset ~/llama-models/models.ini",
          "ollama-compat export --to ~/llama-swap --layout llama-swap && llama-swap --config ~/llama-swap/llama-swap.yaml",
          "ollama-compat export gemma3:4b --to ~/.lmstudio/models --layout lmstudio --copy",
        ],
        ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT", "LLAMA_SERVER", "OLLAMA_COMPAT_CACHE", "OLLAMA_COMPAT_CACHE_MAX_BYTES"],
        "Exit codes: 0 every model exported, 1 a model failed (the others are exported) or an error, 2 usage.",
      ),
    )
    .action(async (models: string[], opts) => set(await (await commands.exportModels()).exportCommand(models, opts, io)));

  program
    .command("mount")
    .description("every installed model as llama.cpp expects it, under DIR, taking no disk: a read-only FUSE mount (translated files are served from the blobs); runs until SIGINT/SIGTERM")
    .argument("<dir>", "an empty folder to mount on (created if missing)")
    .addOption(new Option("--layout <layout>", "models-dir: llama-server --models-dir; lmstudio: publisher/model/file.gguf").choices(["models-dir", "lmstudio"]).default("models-dir"))
    .option("--allow-other", "let other users read the files (FUSE allow_other; users other than root need user_allow_other in /etc/fuse.conf)")
    .option("--daemon", "run in the background; the pid file names it, kill stops it")
    .option("--pid-file <file>", "where the pid goes (default with --daemon: DIR.pid)")
    .option("--log <file>", "with --daemon: where its output goes (default DIR.log)")
    .option("--models <dir>", "the Ollama model store (default: $OLLAMA_MODELS or ~/.ollama/models)")
    .option("--cache-dir <dir>", "where computed tensors are kept (its sidecars/ folder; default beside the translation cache)")
    .addOption(profileOption())
    .addHelpText(
      "after",
      footer(
        ["ollama-compat mount ~/llama-models --daemon && llama-server --models-dir ~/llama-models", "ollama-compat mount ~/.lmstudio/models/ollama --layout lmstudio", "kill $(cat ~/llama-models.pid)"],
        ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT"],
        "Exit codes: 0 unmounted after a signal (or started, with --daemon), 1 error (FUSE not usable here, the mount refused, the daemon died), 2 usage.",
      ),
    )
    .action(async (dir: string, opts) => set(await (await commands.mount()).mountCommand(dir, opts, io)));

  program
    .command("verify")
    .description("translate FILE into a temporary folder, load it in real llama.cpp (llama-server) and generate a few tokens (and one image answer for vision); pass or fail")
    .argument("<file>", "a GGUF file or a model reference")
    .argument("[llama-server-args...]", "after --: passed to llama-server verbatim (e.g. -- --no-repack)")
    .option("--llama-server <path>", "llama-server binary (default: $LLAMA_SERVER, PATH, the tools build cache)")
    .option("--json", "print machine-readable output")
    .addOption(profileOption())
    .addHelpText(
      "after",
      footer(
        ["ollama-compat verify gemma3:4b", "ollama-compat verify model.gguf --json", "ollama-compat verify gemma3:4b -- --no-repack"],
        ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT", "LLAMA_SERVER"],
        "Exit codes: 0 pass, 1 fail (llama.cpp's error text is shown) or error, 2 usage, 3 not supported.",
      ),
    )
    .action(async (file: string, rest: string[], opts) => set(await (await commands.verify()).verifyCommand(file, opts, io, rest)));

  program
    .command("migrate")
    .description(
      "rewrite Ollama-format models in the store into llama.cpp's own layout, in place (translated model layer, projector layer), each loaded by llama-server before its manifest switches; --undo restores the old manifests, --prune frees their blobs",
    )
    .argument("[models...]", "Ollama references to migrate (or --all)")
    .option("--all", "every model of the store")
    .option("--dry-run", "print the plan (layers that change, bytes, free space, reflinks, shared blobs) and write nothing")
    .option("--no-verify", "switch manifests without loading each migrated model in llama-server first")
    .option("--undo", "put back the manifests migrate replaced (the named models', else all), byte for byte")
    .option("--prune", "drop the rollback records (the named models', else all) and delete blobs nothing references any more (older than an hour, as Ollama)")
    .option("--models <dir>", "the Ollama model store (default: $OLLAMA_MODELS or ~/.ollama/models)")
    .option("--llama-server <path>", "llama-server binary for the verification (default: $LLAMA_SERVER, PATH, the tools build cache)")
    .option("--json", "print machine-readable output")
    .addOption(profileOption())
    .addHelpText(
      "after",
      footer(
        ["ollama-compat migrate --all --dry-run", "ollama-compat migrate gemma3:4b", "ollama-compat migrate --undo gemma3:4b", "ollama-compat migrate --prune"],
        ["OLLAMA_MODELS", "OLLAMA_LLAMA_CPP_COMPAT", "LLAMA_SERVER"],
        "Exit codes: 0 done (models left alone are listed with their reason), 1 a model failed its check or verification (its manifest is unchanged) or an error, 2 usage.",
      ),
    )
    .action(async (models: string[], opts) => set(await (await commands.migrate()).migrateCommand(models, opts, io)));

  program
    .command("demo")
    .description("no Ollama store, no download: build a tiny Ollama-format vision model, detect it, translate it, and serve it with llama-server for one text and one image answer")
    .option("--llama-server <path>", "llama-server binary (default: $LLAMA_SERVER, PATH, the tools build cache)")
    .option("--keep <dir>", "write the demo's files into DIR and keep them")
    .argument("[llama-server-args...]", "after --: passed to llama-server verbatim (e.g. -- --no-repack)")
    .addHelpText("after", footer(["ollama-compat demo", "ollama-compat demo -- --no-repack"], ["LLAMA_SERVER", "NO_COLOR"], "Exit codes: 0 every step worked, 1 a step failed (it is named), 2 usage."))
    .action(async (rest: string[], opts) => set(await (await commands.demo()).demoCommand(opts, io, rest)));

  return program;
}

/** Runs the command line; returns the exit code (0 ok, 1 error, 2 usage, 3 not supported). Never throws. */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  const result = { code: ExitCode.ok as number };
  const program = buildProgram(argv, io, result);
  const json = argv.includes("--json");
  const debug = argv.includes("--debug");
  const fail = (code: string, message: string, exit: number, e?: unknown): number => {
    // messages quote files, names and metadata: one line, no control character reaches the terminal
    if (json) io.err(jsonText({ error: { code, message } }) + "\n");
    else io.err(`ollama-compat: ${terminalSafe(message)}\n`);
    if (debug && e instanceof Error && e.stack) io.err(e.stack + "\n");
    return exit;
  };
  try {
    await program.parseAsync(argv as string[], { from: "user" });
    return result.code;
  } catch (e) {
    if (e instanceof CommanderError) {
      // help and version end here too, successfully
      if (e.exitCode === 0 || e.code === "commander.helpDisplayed" || e.code === "commander.version") return ExitCode.ok;
      if (e.code === "commander.help") return ExitCode.usage; // no command: the help went to stderr
      return fail("usage", `${e.message.replace(/^error: /, "")} (see ollama-compat --help)`, ExitCode.usage, e);
    }
    if (e instanceof CliError) {
      const exit = e.code === "usage" ? ExitCode.usage : e.code === "not-supported" ? ExitCode.notSupported : ExitCode.error;
      return fail(e.code, e.message, exit, e);
    }
    const code = e instanceof Error && typeof (e as { code?: unknown }).code === "string" ? ((e as unknown as { code: string }).code) : "error";
    return fail(code, oneLine(e), ExitCode.error, e);
  }
}

/**
 * One line, no stack: the typed errors' messages already name file, offset and expectation.
 * An error that carries llama.cpp's last lines (a failed start) keeps its first line, the
 * log tail having been shown; any other message is kept whole (fail() escapes its line breaks).
 * Node's own file system errors ("ENOTDIR: not a directory, mkdir '/x'") are put in words
 * around the path.
 */
function oneLine(e: unknown): string {
  if (e instanceof Error) {
    const sys = e as NodeJS.ErrnoException;
    if (typeof sys.code === "string" && typeof sys.syscall === "string") {
      const words = e.message.replace(/^[A-Z0-9_]+: /, "").replace(/, \w+ '.*'$/s, "");
      return `${sys.path ?? sys.syscall}: ${words} (${sys.code}, ${sys.syscall})`;
    }
    const code = sys.code;
    const prefix = typeof code === "string" && !e.message.includes(code) ? `${code}: ` : "";
    const logged = Array.isArray((e as { details?: { lastLines?: unknown } }).details?.lastLines);
    return prefix + (logged ? e.message.split("\n")[0] : e.message.trimEnd());
  }
  return String(e);
}
