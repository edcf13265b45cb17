/**
 * Translation throughput against copying the same bytes: a 256 MiB Ollama-style
 * gemma3 file (vision tensors inline, missing RMS epsilon) is translated to a file
 * with TranslatedView.writeTo, next to `cp` (and `cp` + `sync`, the same durability
 * as writeTo's fsync) of the source in the same run.
 * Also times the metadata-only part (translate() on the path), which must not
 * depend on the size of the tensor data.
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GgmlType, GgufModel, GgufValueType, writeGguf } from "@compat/gguf";
import { translate } from "@compat/handlers";

const MiB = 1024 * 1024;
const REPEATS = 5;

function bigOllamaGemma3(totalMiB: number): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "gemma3");
  m.setU32("gemma3.context_length", 131072);
  m.setU32("gemma3.mm.tokens_per_image", 256);
  m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, Array.from({ length: 4097 }, (_, i) => `tok${i}`));
  const rowBytes = 4096 * 2; // F16 rows of 4096
  const rows = (totalMiB * MiB) / rowBytes / 8;
  const names = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "blk.1.attn_q.weight", "blk.1.ffn_up.weight", "mm.input_projection.weight", "v.blk.0.attn_q.weight"];
  for (const [i, name] of names.entries()) {
    const bytes = new Uint8Array(rows * rowBytes).fill(i + 1);
    m.addTensor({ name, type: GgmlType.F16, shape: [4096, name === "token_embd.weight" ? 4096 : rows], data: { kind: "bytes", bytes: name === "token_embd.weight" ? new Uint8Array(4096 * rowBytes) : bytes } });
  }
  return m;
}

function median(xs: number[]): number {
  const s = xs.slice().sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function time(fn: () => Promise<unknown> | unknown): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const dir = await mkdtemp(join(tmpdir(), "compat-translate-bench-"));
try {
  const src = join(dir, "ollama-gemma3.gguf");
  await writeGguf(bigOllamaGemma3(256), src);
  const size = (await stat(src)).size;
  const cp: number[] = [];
  const cpSync: number[] = [];
  const tr: number[] = [];
  const meta: number[] = [];
  for (let i = 0; i < REPEATS; i++) {
    cp.push(await time(() => execFileSync("cp", [src, join(dir, "copy.gguf")])));
    // writeTo fsyncs before its rename; this is the same durability for cp
    cpSync.push(await time(() => execFileSync("sh", ["-c", 'cp "$0" "$1" && sync "$1"', src, join(dir, "copy-synced.gguf")])));
    tr.push(
      await time(async () => {
        const view = (await translate(src))!;
        await view.writeTo(join(dir, "translated.gguf"));
        await view.close();
      }),
    );
    meta.push(
      await time(async () => {
        const view = (await translate(src))!;
        await view.close();
      }),
    );
  }
  const out = (await stat(join(dir, "translated.gguf"))).size;
  const mbps = (ms: number, bytes: number) => (bytes / MiB / (ms / 1000)).toFixed(0);
  console.log(`translate bench: ${(size / MiB).toFixed(0)} MiB Ollama gemma3 -> ${(out / MiB).toFixed(0)} MiB translated; median of ${REPEATS}`);
  console.log(`| case                          | median ms | MiB/s | ratio to cp |`);
  console.log(`|-------------------------------|----------:|------:|------------:|`);
  console.log(`| cp (same source bytes)        | ${median(cp).toFixed(0).padStart(9)} | ${mbps(median(cp), size).padStart(5)} |        1.0x |`);
  console.log(`| cp + sync (same durability)   | ${median(cpSync).toFixed(0).padStart(9)} | ${mbps(median(cpSync), size).padStart(5)} | ${(median(cpSync) / median(cp)).toFixed(2).padStart(10)}x |`);
  console.log(`| translate + writeTo (atomic)  | ${median(tr).toFixed(0).padStart(9)} | ${mbps(median(tr), out).padStart(5)} | ${(median(tr) / median(cp)).toFixed(2).padStart(10)}x |`);
  console.log(`| translate, metadata only      | ${median(meta).toFixed(1).padStart(9)} |     - | ${(median(meta) / median(cp)).toFixed(3).padStart(10)}x |`);
} finally {
  await rm(dir, { recursive: true, force: true });
}
