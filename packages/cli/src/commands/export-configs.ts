/**
 * The configuration files `export` writes for llama.cpp's front ends, so that they serve each
 * model as `serve` does (projector, embedding mode, context, sampling, stop words, its Ollama
 * name): a `--models-preset` file for llama-server's router, a configuration for llama-swap.
 */
import { commonArgs } from "@compat/server-bridge";
import type { ExportRecord, RecordedModel } from "./export-files";

/** The preset file of the models-dir layout, beside the models. */
export const PRESET_FILE = "models.ini";
/** llama-swap's configuration in the llama-swap layout. */
export const LLAMA_SWAP_FILE = "llama-swap.yaml";

/**
 * The models laid out in the folder tree both configurations describe (models-dir and
 * llama-swap place files alike; lmstudio's tree is LM Studio's own), by name: sorted, so a
 * file does not change with the order of exports.
 */
function modelsInTree(record: ExportRecord): Array<[string, RecordedModel]> {
  return Object.entries(record.models)
    .filter(([, m]) => m.layout !== "lmstudio")
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * llama-server's `--models-preset` file (common/preset.cpp reads it): one section per model,
 * the bridge's presetSection with the exported files' absolute paths (llama-server resolves a
 * relative one against its own working directory).
 */
export function presetFile(record: ExportRecord): string {
  const sections = modelsInTree(record).map(([, m]) => m.preset);
  return [
    "; llama-server's --models-preset file, written by `ollama-compat export` (it rewrites this file:",
    "; edit the models' arguments here only if you will not export into this folder again).",
    "; Run: llama-server --models-preset <this file>",
    "version = 1",
    "",
    ...sections.map((s) => s + "\n"),
  ].join("\n");
}

/** A word for a POSIX shell's word splitting, as llama-swap splits `cmd` (shlex): quoted unless it is plain. */
export function shellWord(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** A YAML scalar that is read back as exactly `s` (JSON's string syntax is YAML's double-quoted one). */
function yamlString(s: string): string {
  return JSON.stringify(s);
}

/** llama-swap substitutes `${NAME}` (and `${env.NAME}`) everywhere in its file, with no way to escape one. */
const LLAMA_SWAP_MACRO = /\$\{[A-Za-z0-9_.-]+\}/;

/**
 * One model's llama-server command line for llama-swap: the binary, the host and port `serve`
 * gives it (the port as llama-swap's `${PORT}`), then the model's own arguments. Arguments
 * llama-swap cannot carry (a `${…}` it would take for a macro, a control character its
 * line-based parsing would break) are left out, each with a warning.
 */
function llamaSwapCommand(llamaServer: string, name: string, args: readonly string[], warn: (name: string, msg: string) => void): string[] {
  const common = commonArgs("127.0.0.1", 0, undefined);
  common[common.indexOf("--port") + 1] = "${PORT}";
  const lines = [shellWord(llamaServer), ...pairs(common).map((p) => p.map((w) => (w === "${PORT}" ? w : shellWord(w))).join(" "))];
  for (const pair of pairs(args)) {
    const bad = pair.find((w) => LLAMA_SWAP_MACRO.test(w) || /[\0-\x1f\x7f]/.test(w));
    if (bad !== undefined) {
      warn(name, `${name}: ${pair[0]} ${JSON.stringify(pair.at(-1))} cannot be written in llama-swap's configuration (a \${…} or a control character); left out`);
      continue;
    }
    lines.push(pair.map(shellWord).join(" "));
  }
  return lines;
}

/** Flags without a value among those `serve` gives llama-server (commonArgs and modelArgs); every other flag takes one. */
const VALUELESS = new Set(["--embedding", "--no-mmap", "--no-webui", "--offline"]);

/** The arguments as flags with their values: `--ctx-size 4096`, `--embedding`. */
function pairs(args: readonly string[]): string[][] {
  const out: string[][] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    out.push(a.startsWith("-") && !VALUELESS.has(a) && i + 1 < args.length ? [a, args[++i]!] : [a]);
  }
  return out;
}

/**
 * llama-swap's configuration (its config.example.yaml): one entry per model under its Ollama
 * name, `cmd` the llama-server command line `serve` builds (one flag per line; llama-swap
 * splits it as a POSIX shell would), llama-server's /health as the readiness check.
 */
export function llamaSwapFile(record: ExportRecord, llamaServer: string, warn: (name: string, msg: string) => void): string {
  const lines = [
    "# llama-swap's configuration, written by `ollama-compat export` (it rewrites this file).",
    "# Run: llama-swap --config <this file>",
    "models:",
  ];
  for (const [name, m] of modelsInTree(record)) {
    lines.push(`  ${yamlString(name)}:`, "    cmd: |");
    for (const l of llamaSwapCommand(llamaServer, name, m.args, warn)) lines.push(`      ${l}`);
    lines.push(`    proxy: ${yamlString("http://127.0.0.1:${PORT}")}`, `    checkEndpoint: ${yamlString("/health")}`);
  }
  if (lines.length === 3) lines[2] = "models: {}";
  return lines.join("\n") + "\n";
}
