/**
 * The WebAssembly SIMD kernels must give exactly the JS kernels' bits (and the native addon's, where
 * it is loaded). Property-tested with fast-check over arbitrary lengths and every kind of 16-bit
 * pattern; the ggml reference vectors run on this backend too (reference.test.ts).
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { GgmlType as T, ggmlTypeInfo } from "@compat/gguf";
import { activeBackend, backendInfo, ready, setBackend, toF32Into } from "../src/index";
import { toF32IntoJs } from "../src/convert";
import { nativeAvailable } from "../src/native";
import { reloadWasm, wasmKernels } from "../src/wasm";
import { randomBlocks } from "./support/blocks";
import { randomBytes as prngBytes } from "./support/prng";
import { bytesOf } from "./support/vectors";

let available = false;

beforeAll(async () => {
  if (!wasmKernels()) {
    // Build on demand (like the addon) so the WASM path runs wherever clang's wasm32 target exists.
    spawnSync(process.execPath, [fileURLToPath(new URL("../scripts/build-wasm.mjs", import.meta.url))], { stdio: "ignore" });
    reloadWasm();
  }
  await ready();
  available = backendInfo().wasmTypes.length > 0;
});

afterAll(() => {
  setBackend("auto");
});

const randomBytes = (n: number, seed: number): Uint8Array => prngBytes(seed, n);

const WASM_TYPES = [T.F16, T.BF16, T.Q8_0, T.Q4_K, T.Q6_K, T.MXFP4, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q5_K, T.IQ4_NL, T.IQ4_XS];

function convert(backend: "wasm" | "native", type: number, input: Uint8Array): Uint32Array {
  const layout = ggmlTypeInfo(type);
  const n = (input.byteLength / layout.typeSize) * layout.blockSize;
  setBackend(backend);
  const out = toF32Into(type, input, new Float32Array(n), n);
  setBackend("auto");
  return new Uint32Array(out.buffer);
}

function js(type: number, input: Uint8Array): Uint32Array {
  const layout = ggmlTypeInfo(type);
  const n = (input.byteLength / layout.typeSize) * layout.blockSize;
  return new Uint32Array(toF32IntoJs(type, input, new Float32Array(n), n).buffer);
}

/** 16-bit patterns weighted toward the edges: NaNs (both signs), Inf, subnormals, zeros, max finite. */
const half = fc.oneof(
  fc.integer({ min: 0, max: 0xffff }),
  fc.integer({ min: 0x7c01, max: 0x7fff }),
  fc.integer({ min: 0xfc01, max: 0xffff }),
  fc.constantFrom(0x7c00, 0xfc00, 0x0000, 0x8000, 0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff, 0x0400),
  fc.integer({ min: 0x0001, max: 0x03ff }),
  fc.integer({ min: 0x8001, max: 0x83ff }),
);

describe("WASM kernels", () => {
  it("load, report their types and become the backend when the addon is skipped", (ctx) => {
    if (!available) ctx.skip();
    expect(backendInfo().wasmTypes.sort((a, b) => a - b)).toEqual([...WASM_TYPES].sort((a, b) => a - b));
    expect(setBackend("wasm")).toBe("wasm");
    expect(activeBackend()).toBe("wasm");
    expect(setBackend("js")).toBe("js");
    expect(setBackend("auto")).toBe(nativeAvailable() ? "native" : "wasm");
  });

  it("F16 and BF16: all 65536 bit patterns, NaN payloads included, bit for bit", (ctx) => {
    if (!available) ctx.skip();
    const all = bytesOf(Uint16Array.from({ length: 65536 }, (_, i) => i));
    for (const type of [T.F16, T.BF16]) expect(Buffer.from(convert("wasm", type, all).buffer).equals(Buffer.from(js(type, all).buffer))).toBe(true);
  });

  it("property: F16/BF16 arrays of any length and alignment match JS (and native) bit for bit", (ctx) => {
    if (!available) ctx.skip();
    fc.assert(
      fc.property(fc.array(half, { maxLength: 300 }), fc.constantFrom(T.F16, T.BF16), fc.nat(3), (values, type, shift) => {
        const raw = bytesOf(Uint16Array.from(values));
        const padded = new Uint8Array(raw.byteLength + shift);
        padded.set(raw, shift);
        const input = padded.subarray(shift);
        const expected = Buffer.from(js(type, input).buffer);
        expect(Buffer.from(convert("wasm", type, input).buffer).equals(expected)).toBe(true);
        if (nativeAvailable()) expect(Buffer.from(convert("native", type, input).buffer).equals(expected)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it("property: quantized blocks with any scale (NaN/Inf/subnormal included) match JS (and native)", (ctx) => {
    if (!available) ctx.skip();
    const quant = fc.constantFrom(...WASM_TYPES.filter((t) => t !== T.F16 && t !== T.BF16));
    fc.assert(
      fc.property(quant, fc.integer({ min: 1, max: 12 }), fc.integer(), (type, nBlocks, seed) => {
        const input = randomBytes(nBlocks * ggmlTypeInfo(type).typeSize, seed);
        const b = js(type, input);
        // Arithmetic on a NaN scale leaves the NaN payload unspecified in wasm, C and JS engines
        // alike, so NaN outputs are compared as NaN; every other value must match bit for bit.
        for (const a of [convert("wasm", type, input), ...(nativeAvailable() ? [convert("native", type, input)] : [])]) {
          for (let i = 0; i < b.length; i++) {
            const aNaN = ((a[i] as number) & 0x7fffffff) > 0x7f800000;
            const bNaN = ((b[i] as number) & 0x7fffffff) > 0x7f800000;
            if (aNaN || bNaN) expect([i, aNaN]).toEqual([i, bNaN]);
            else if (a[i] !== b[i]) expect([i, a[i]]).toEqual([i, b[i]]);
          }
        }
      }),
      { numRuns: 200 },
    );
  });

  const bulk: [string, number, number][] = [
    ["Q8_0", T.Q8_0, 2049],
    ["Q4_K", T.Q4_K, 257],
    ["Q6_K", T.Q6_K, 257],
    ["MXFP4", T.MXFP4, 20000],
    ["F16 (more than one chunk)", T.F16, 300_001],
    ["Q4_0", T.Q4_0, 257],
    ["Q4_1", T.Q4_1, 257],
    ["Q5_0", T.Q5_0, 257],
    ["Q5_1", T.Q5_1, 257],
    ["Q5_K", T.Q5_K, 65],
    ["IQ4_NL", T.IQ4_NL, 257],
    ["IQ4_XS", T.IQ4_XS, 65],
  ];
  for (const [label, type, count] of bulk) {
    it(`${label}: many chunks, finite scales, bit for bit`, (ctx) => {
      if (!available) ctx.skip();
      const input = type === T.F16 ? randomBytes(count * 2, 7) : randomBlocks(type, count, 9);
      expect(Buffer.from(convert("wasm", type, input).buffer).equals(Buffer.from(js(type, input).buffer))).toBe(true);
    });
  }

  it("where synchronous compilation is refused, compiles in the background; JS runs until ready()", async (ctx) => {
    if (!available) ctx.skip();
    const spy = vi.spyOn(WebAssembly, "Module").mockImplementation(() => {
      throw new RangeError("synchronous compilation refused (simulated)");
    });
    try {
      reloadWasm();
      expect(setBackend("wasm")).toBe("js"); // still compiling
      const input = bytesOf(Uint16Array.from({ length: 1000 }, (_, i) => i * 65));
      expect(Buffer.from(convert("wasm", T.F16, input).buffer).equals(Buffer.from(js(T.F16, input).buffer))).toBe(true);
      setBackend("wasm");
      expect(await ready()).toBe("wasm");
      expect(Buffer.from(convert("wasm", T.F16, input).buffer).equals(Buffer.from(js(T.F16, input).buffer))).toBe(true);
    } finally {
      spy.mockRestore();
      setBackend("auto");
    }
  });

  it("types without a WASM kernel fall through to JS", (ctx) => {
    if (!available) ctx.skip();
    const input = randomBlocks(T.Q3_K, 3, 5);
    expect(Buffer.from(convert("wasm", T.Q3_K, input).buffer).equals(Buffer.from(js(T.Q3_K, input).buffer))).toBe(true);
  });
});
