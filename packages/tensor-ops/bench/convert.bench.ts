/**
 * Conversion throughput, JS, WASM SIMD and native, next to Buffer.copy of the same input bytes in the same run.
 * MB/s counts input (GGUF) bytes; every figure is the median of several repeats.
 *   npm run bench -w packages/tensor-ops        (BENCH_MB=32 for a larger tensor)
 */
import { GgmlType as T, ggmlTypeInfo } from "@compat/gguf";
import { backendInfo, setBackend, toF32Into } from "../src/index";
import { toF32IntoJs } from "../src/convert";
import { nativeAvailable } from "../src/native";
import { randomBlocks } from "../test/support/blocks";

const targetBytes = Number(process.env.BENCH_MB ?? 16) * 1024 * 1024;
const repeats = Number(process.env.BENCH_REPEATS ?? 7);

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[s.length >> 1] as number;
}

/**
 * Median MB/s of each function over `bytes` input bytes. The contenders run round-robin within
 * every repeat, so a busy shared machine slows them alike and the ratios stay meaningful.
 */
function measure(bytes: number, fns: (() => void)[]): number[] {
  for (const fn of fns) fn(); // warm up (JIT, first touch of the output pages)
  const rates = fns.map(() => [] as number[]);
  for (let r = 0; r < repeats; r++) {
    fns.forEach((fn, i) => {
      const t0 = process.hrtime.bigint();
      fn();
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      (rates[i] as number[]).push(bytes / 1e6 / seconds);
    });
  }
  return rates.map(median);
}

const types = [T.F16, T.BF16, T.Q8_0, T.Q4_K, T.Q6_K, T.MXFP4, T.Q4_0, T.Q5_K, T.IQ4_XS, T.IQ2_XXS, T.Q3_K];
const native = nativeAvailable();
const info = backendInfo();
console.log(
  `tensor-ops conversion bench: ${(targetBytes / 1048576).toFixed(0)} MiB per type, median of ${repeats}; native ${native ? `yes (${info.isa})` : "not built"}; wasm ${info.wasmTypes.length > 0 ? "yes (simd128)" : `no (${info.wasmLoadError ?? "not built"})`}`,
);

const rows: string[][] = [];
for (const type of types) {
  const layout = ggmlTypeInfo(type);
  const nBlocks = Math.max(1, Math.floor(targetBytes / layout.typeSize));
  const n = nBlocks * layout.blockSize;
  const input = Buffer.from(randomBlocks(type, nBlocks, 42));
  const copyTarget = Buffer.alloc(input.byteLength);
  const out = new Float32Array(n);

  const hasNative = native && info.nativeTypes.includes(type);
  const hasWasm = info.wasmTypes.includes(type);
  const wasmRun = () => {
    setBackend("wasm");
    toF32Into(type, input, out, n);
    setBackend("auto");
  };
  setBackend("auto");
  const rates = measure(input.byteLength, [
    () => input.copy(copyTarget),
    () => toF32IntoJs(type, input, out, n),
    ...(hasWasm ? [wasmRun] : []),
    ...(hasNative ? [() => toF32Into(type, input, out, n)] : []),
  ]);
  const [copy, js] = rates as [number, number];
  const wasm = hasWasm ? rates[2] : undefined;
  const nat = hasNative ? rates[hasWasm ? 3 : 2] : undefined;
  const best = Math.max(js, wasm ?? 0, nat ?? 0);
  const ratio = (v: number | undefined) => (v === undefined ? "-" : `${(v / js).toFixed(1)}x`);
  rows.push([
    `${T[type]} -> F32`,
    copy.toFixed(0),
    js.toFixed(0),
    wasm === undefined ? "-" : wasm.toFixed(0),
    ratio(wasm),
    nat === undefined ? "-" : nat.toFixed(0),
    ratio(nat),
    `${(copy / best).toFixed(1)}x`,
  ]);
}

const header = ["conversion", "copy MB/s", "JS MB/s", "WASM MB/s", "WASM/JS", "native MB/s", "native/JS", "copy/best"];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
const line = (cells: string[]) => `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join(" | ")} |`;
console.log(line(header));
console.log(`|${widths.map((w, i) => (i === 0 ? "-".repeat(w + 2) : `${"-".repeat(w + 1)}:`)).join("|")}|`);
for (const r of rows) console.log(line(r));
