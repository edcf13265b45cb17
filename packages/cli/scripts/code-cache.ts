/**
 * Build step after tsup: writes dist/cli.cjs.cache, the V8 code cache dist/bin.cjs hands to V8
 * with dist/cli.cjs. The bundle is loaded exactly as the binary loads it (src/bundle-loader.ts),
 * then the common commands run in this process on a tiny Ollama-style gemma3 file (--help,
 * inspect, detect, translate --dry-run and a real translate), so the cache holds the functions
 * they compile, not just the top level. The file starts with the bundle's build id (a cache from
 * another build is never used); V8 itself rejects a cache from another V8 version or flags.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { GgmlType, GgufModel, GgufValueType, writeGguf } from "@compat/gguf";
import { CLI_BUNDLE, CODE_CACHE, codeCacheFile, loadBundle } from "../src/bundle-loader";
import type { CliIo } from "../src/io";

const dist = fileURLToPath(new URL("../dist/", import.meta.url));
const { exports, script, buildId } = loadBundle(join(dist, CLI_BUNDLE));
if (buildId === undefined) throw new Error(`${CLI_BUNDLE} has no build id (tsup.config.ts writes it)`);
const { runCli } = exports as { runCli(argv: string[], io: CliIo): Promise<number> };

/** A few KiB shaped like an Ollama gemma3 vision blob: text blocks and inline v.* / mm.* tensors. */
function tinyGemma3(): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "gemma3");
  m.setU32("gemma3.context_length", 8192);
  m.setU32("gemma3.embedding_length", 8);
  m.setU32("gemma3.block_count", 1);
  m.setU32("gemma3.mm.tokens_per_image", 256);
  m.setString("tokenizer.ggml.model", "llama");
  m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, ["<pad>", "<eos>", "<bos>", "a", "b"]);
  m.setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, [0, 0, 0, -1, -2]);
  m.setArray("tokenizer.ggml.token_type", GgufValueType.INT32, [3, 3, 3, 1, 1]);
  const names = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "v.blk.0.attn_q.weight", "mm.mm_input_projection.weight", "v.patch_embd.weight"];
  for (const name of names) m.addTensor({ name, type: GgmlType.F16, shape: [8, 4], data: { kind: "bytes", bytes: new Uint8Array(64) } });
  m.addTensor({ name: "output_norm.weight", type: GgmlType.F32, shape: [8], data: { kind: "bytes", bytes: new Uint8Array(32) } });
  return m;
}

const tmp = mkdtempSync(join(tmpdir(), "ollama-compat-code-cache-"));
try {
  const file = join(tmp, "blob.gguf");
  await writeGguf(tinyGemma3(), file);
  const io: CliIo = { out: () => {}, err: () => {}, env: {} };
  const runs = [
    ["--help"],
    ["inspect", file],
    ["inspect", file, "--json"],
    ["detect", file],
    ["detect", file, "--json"],
    ["translate", file, "--dry-run"],
    ["translate", file, "--dry-run", "--json"],
    ["translate", file, "-o", join(tmp, "out.gguf"), "-q"],
  ];
  for (const argv of runs) {
    const code = await runCli(argv, io);
    if (code !== 0) throw new Error(`code cache warm-up: ollama-compat ${argv.join(" ")} exited ${code}`);
  }
  writeFileSync(join(dist, CODE_CACHE), codeCacheFile(buildId, script.createCachedData()));
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
