/** Every conversion checked bit for bit against vectors produced by real ggml (scripts/gen-vectors.ts). */
import { describe, expect, it } from "vitest";
import { allGgmlTypes, GgmlType as T, ggmlTypeInfo } from "@compat/gguf";
import { backendInfo, fromF32, setBackend, toF32 } from "../src/index";
import { toF32IntoJs } from "../src/convert";
import { nativeAvailable } from "../src/native";
import { randomBlocks } from "./support/blocks";
import { randomU32 } from "./support/prng";
import { bytesOf, fromB64, reference, sha256 } from "./support/vectors";

/** f32 bytes as floats, bits untouched (a Float32Array keeps NaN payloads); copied, so any alignment works. */
const asF32 = (bytes: Uint8Array): Float32Array => new Float32Array(bytes.slice().buffer);

// "wasm" skips the addon; "auto" is the addon where it loads.
const backends = [
  "js" as const,
  ...(backendInfo().wasmTypes.length > 0 ? (["wasm"] as const) : []),
  ...(nativeAvailable() ? (["auto"] as const) : []),
];

describe("type layouts", () => {
  it("@compat/gguf's table, which this package reads, matches ggml's type traits for every type ggml reports", () => {
    const ours = new Map(allGgmlTypes().map((type) => [type as number, ggmlTypeInfo(type)]));
    for (const t of reference.types) {
      const l = ours.get(t.id);
      expect(l, t.name).toBeDefined();
      expect([l?.blockSize, l?.typeSize, l?.name]).toEqual([t.blockSize, t.blockBytes, t.name]);
    }
    expect(ours.size).toBe(reference.types.length);
  });
});

describe.each(backends)("dequantization against ggml (%s backend)", (backend) => {
  for (const [name, v] of Object.entries(reference.dequant)) {
    describe(name, () => {
      it("small stored blocks", () => {
        setBackend(backend);
        const out = toF32(v.type, fromB64(v.small.input), v.small.nElements);
        expect(Buffer.from(bytesOf(out)).toString("base64")).toBe(v.small.output);
      });
      it("bulk seeded blocks", () => {
        setBackend(backend);
        const input = randomBlocks(v.type, v.bulk.nElements / (v.small.nElements / 2), v.bulk.seed);
        expect(sha256(toF32(v.type, input, v.bulk.nElements))).toBe(v.bulk.outputSha256);
      });
      it("blocks quantized by ggml", () => {
        setBackend(backend);
        expect(sha256(toF32(v.type, fromB64(v.quantized.input), v.quantized.nElements))).toBe(v.quantized.outputSha256);
      });
    });
  }
  it("covers every type ggml can dequantize", () => {
    const names = reference.types.filter((t) => t.hasToFloat).map((t) => t.name.toUpperCase());
    for (const n of names) {
      if (n === "F16" || n === "BF16") continue;
      expect(Object.keys(reference.dequant).map((k) => k.toUpperCase())).toContain(n);
    }
  });
});

describe.each(backends)("16-bit floats against ggml (%s backend)", (backend) => {
  const all = bytesOf(Uint16Array.from({ length: 65536 }, (_, i) => i));
  it("F16 -> F32 for all 65536 bit patterns (NaN payloads included)", () => {
    setBackend(backend);
    expect(sha256(toF32(T.F16, all, 65536))).toBe(reference.f16ToF32AllSha256);
  });
  it("BF16 -> F32 for all 65536 bit patterns", () => {
    setBackend(backend);
    expect(sha256(toF32(T.BF16, all, 65536))).toBe(reference.bf16ToF32AllSha256);
  });
});

describe("F32 -> F16 / BF16 against ggml's from_float_ref", () => {
  setBackend("js");
  const f16All = new Uint32Array(toF32IntoJs(T.F16, bytesOf(Uint16Array.from({ length: 65536 }, (_, i) => i)), new Float32Array(65536), 65536).buffer);
  const widenedF = new Float32Array(f16All.slice().buffer);
  const mids = new Float32Array(65536);
  for (let i = 0; i < 65535; i++) mids[i] = ((widenedF[i] as number) + (widenedF[i + 1] as number)) / 2;
  const cases: Record<string, Uint8Array> = {
    edges: fromB64(reference.fromF32.edges),
    random: bytesOf(randomU32(reference.fromF32.randomSeed, reference.fromF32.randomCount)),
    halves: bytesOf(f16All.slice()),
    midpoints: bytesOf(mids),
  };
  for (const [label, input] of Object.entries(cases)) {
    it(`F16 ${label}`, () => {
      const out = fromF32(T.F16, asF32(input));
      const want = reference.fromF32.F16[label] as string;
      if (label === "edges") expect(Buffer.from(out).toString("base64")).toBe(want);
      else expect(sha256(out)).toBe(want);
    });
    it(`BF16 ${label}`, () => {
      const out = fromF32(T.BF16, asF32(input));
      const want = reference.fromF32.BF16[label] as string;
      if (label === "edges") expect(Buffer.from(out).toString("base64")).toBe(want);
      else expect(sha256(out)).toBe(want);
    });
  }
});
