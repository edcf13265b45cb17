/**
 * Produces the reference vectors in test/vectors/ from real ggml: compiles scripts/ggml-harness.c
 * against the prebuilt libggml-base.so that node-llama-cpp ships, then runs ggml's own to_float,
 * quantizers and fp16/bf16 converters on deterministic inputs. Only small vectors and SHA-256
 * digests are written; the harness binary stays in a temp directory.
 *
 *   npx tsx packages/tensor-ops/scripts/gen-vectors.ts [--llama-src DIR] [--lib DIR]
 *
 * --llama-src defaults to the llama.cpp tree the testkit finds (LLAMA_CPP_SRC, or beside LLAMA_BIN).
 */
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { llamaCppSourceDir } from "@compat/testkit";
import { GgmlType as T, ggmlTypeInfo } from "@compat/gguf";
import { DEQUANT_TYPES, edgeF32Bits, randomBlocks } from "../test/support/blocks";
import { randomNormals, randomU32 } from "../test/support/prng";

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? (process.argv[i + 1] as string) : undefined;
};
const here = fileURLToPath(new URL(".", import.meta.url));
const llamaSrc = arg("--llama-src") ?? (await llamaCppSourceDir());
if (llamaSrc === undefined) throw new Error("no llama.cpp source tree: pass --llama-src DIR or set LLAMA_BIN");
const libDir = arg("--lib") ?? join(here, "../../../node_modules/@node-llama-cpp/linux-x64/bins/linux-x64");
const outDir = join(here, "../test/vectors");

const work = mkdtempSync(join(tmpdir(), "tensor-ops-harness-"));
const harness = join(work, "ggml-harness");
execFileSync("cc", [
  "-O1", "-o", harness, join(here, "ggml-harness.c"),
  `-I${llamaSrc}/ggml/include`, `-L${libDir}`, "-l:libggml-base.so", `-Wl,-rpath,${libDir}`,
]);

function run(args: string[], input?: Uint8Array): Buffer {
  const r = spawnSync(harness, args, { input, maxBuffer: 1 << 30 });
  if (r.status !== 0) throw new Error(`harness ${args.join(" ")} failed: ${r.stderr.toString()}`);
  return r.stdout;
}
const sha256 = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");
const b64 = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("base64");
const bytesOf = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

// Type layouts as ggml reports them.
const info = run(["info"]).toString().trim().split("\n").map((line) => {
  const [id, name, blck, size, toFloat] = line.split(" ");
  return { id: Number(id), name, blockSize: Number(blck), blockBytes: Number(size), hasToFloat: toFloat === "1" };
});

// Dequantization: a small stored case, a large seeded case (digest only) and ggml-quantized data.
const SMALL_BLOCKS = 2;
const BULK_ELEMENTS = 16384;
const QUANT_ELEMENTS = 4096;
const dequant: Record<string, unknown> = {};
for (const type of DEQUANT_TYPES) {
  const layout = ggmlTypeInfo(type);
  const seed = 1000 + type;
  const small = randomBlocks(type, SMALL_BLOCKS, seed);
  const smallN = SMALL_BLOCKS * layout.blockSize;
  const smallOut = run(["deq", String(type), String(smallN)], small);

  const bulkBlocks = BULK_ELEMENTS / layout.blockSize;
  const bulk = randomBlocks(type, bulkBlocks, seed + 7);
  const bulkOut = run(["deq", String(type), String(BULK_ELEMENTS)], bulk);

  const source = randomNormals(seed + 13, QUANT_ELEMENTS, 0.05);
  const quantized = run([type === T.Q8_K ? "from" : "quant", String(type), String(QUANT_ELEMENTS)], bytesOf(source));
  const quantOut = run(["deq", String(type), String(QUANT_ELEMENTS)], quantized);

  dequant[T[type] as string] = { // keyed by the GgmlType constant ("Q4_K"), as the stored vectors are
    type,
    small: { seed, nElements: smallN, input: b64(small), output: b64(smallOut) },
    bulk: { seed: seed + 7, nElements: BULK_ELEMENTS, outputSha256: sha256(bulkOut) },
    quantized: { nElements: QUANT_ELEMENTS, input: b64(quantized), outputSha256: sha256(quantOut) },
  };
}

// 16-bit floats: every bit pattern through to_float, and f32 -> f16/bf16 through from_float_ref.
const allHalves = Uint16Array.from({ length: 65536 }, (_, i) => i);
const f16All = run(["deq", String(T.F16), "65536"], bytesOf(allHalves));
const bf16All = run(["deq", String(T.BF16), "65536"], bytesOf(allHalves));
const edges = edgeF32Bits();
const RANDOM_F32 = 1 << 18;
const randomBits = randomU32(77, RANDOM_F32);
// Also every f16 value and every midpoint between neighbours, widened to f32 (ties are the hard part).
const widened = new Uint32Array(f16All.buffer, f16All.byteOffset, 65536);
const mids = new Float32Array(65536);
const widenedF = new Float32Array(widened.slice().buffer);
for (let i = 0; i < 65535; i++) mids[i] = ((widenedF[i] as number) + (widenedF[i + 1] as number)) / 2;
const fromCases = {
  edges: bytesOf(edges),
  random: bytesOf(randomBits),
  halves: bytesOf(widened.slice()),
  midpoints: bytesOf(mids),
};
const from: Record<string, Record<string, string>> = { F16: {}, BF16: {} };
for (const [label, input] of Object.entries(fromCases)) {
  const n = String(input.byteLength / 4);
  const f16 = run(["from", String(T.F16), n], input);
  const bf16 = run(["from", String(T.BF16), n], input);
  (from.F16 as Record<string, string>)[label] = label === "edges" ? b64(f16) : sha256(f16);
  (from.BF16 as Record<string, string>)[label] = label === "edges" ? b64(bf16) : sha256(bf16);
}

const vectors = {
  generator: "packages/tensor-ops/scripts/gen-vectors.ts",
  ggml: "libggml-base.so from @node-llama-cpp/linux-x64 (node-llama-cpp 3.21.1)",
  types: info,
  dequant,
  f16ToF32AllSha256: sha256(f16All),
  bf16ToF32AllSha256: sha256(bf16All),
  fromF32: { randomSeed: 77, randomCount: RANDOM_F32, edges: b64(bytesOf(edges)), ...from },
};
writeFileSync(join(outDir, "ggml-reference.json"), `${JSON.stringify(vectors, null, 1)}\n`);
rmSync(work, { recursive: true, force: true });
console.log(`wrote ${join(outDir, "ggml-reference.json")}`);
