/** The native kernels must give exactly the JS kernels' bits on the same inputs. */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import fc from "fast-check";
import { GgmlType as T, GgufModel, GgufValueType, bufferSource, ggmlTypeInfo, readGguf, serializeGguf } from "@compat/gguf";
import { activeBackend, backendInfo, largeBytes, nativeStringWalk, resamplePositionGrid, setBackend, toF32, toF32Into } from "../src/index";
import { toF32IntoJs } from "../src/convert";
import { nativeAddon, reloadNative } from "../src/native";
import { randomBlocks } from "./support/blocks";
import { bytesOf } from "./support/vectors";

let available = false;

beforeAll(() => {
  available = reloadNative();
  if (!available && process.env.COMPAT_TENSOR_OPS !== "js") {
    // Build on demand so the native path is exercised whenever a compiler is present.
    const script = fileURLToPath(new URL("../scripts/build-native.mjs", import.meta.url));
    spawnSync(process.execPath, [script], { stdio: "ignore" });
    available = reloadNative();
  }
});

describe("backend selection", () => {
  it("loads the local build or the shipped prebuild without node-gyp-build, and with it under LIBC", () => {
    if (!available) return;
    // a fresh process: which modules the load pulled in
    const modulesOf = (env: Record<string, string>) => {
      const code = 'import("./src/native.ts").then((m) => { if (m.nativeAddon() === undefined) process.exit(3); console.log(JSON.stringify(Object.keys(require("node:module")._cache))); })';
      const r = spawnSync(process.execPath, ["--import", "tsx", "-e", code], { cwd: fileURLToPath(new URL("..", import.meta.url)), encoding: "utf8", env: { ...process.env, ...env } });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as string[];
    };
    const usual = modulesOf({});
    expect(usual.some((m) => m.endsWith(".node"))).toBe(true);
    expect(usual.some((m) => m.includes("node-gyp-build"))).toBe(false);
    // an override node-gyp-build reads (set but empty: it still looks at build/Release first), so its own search decides
    expect(modulesOf({ PREBUILDS_ONLY: "" }).some((m) => m.includes("node-gyp-build"))).toBe(true);
  });

  it("reports the active backend and can be forced to JS", () => {
    setBackend("js");
    expect(activeBackend()).toBe("js");
    expect(setBackend("auto")).toBe(available ? "native" : backendInfo().wasmTypes.length > 0 ? "wasm" : "js");
    expect(backendInfo().backend).toBe(activeBackend());
  });
});

describe.each(["auto", "scalar"] as const)("native kernels (%s ISA) are bit-identical to JS", (isa) => {
  const cases: [string, number, () => Uint8Array][] = [
    ["F16 (all 65536 patterns)", T.F16, () => bytesOf(Uint16Array.from({ length: 65536 }, (_, i) => i))],
    ["BF16 (all 65536 patterns)", T.BF16, () => bytesOf(Uint16Array.from({ length: 65536 }, (_, i) => i))],
    ["F16 (odd tail length)", T.F16, () => bytesOf(Uint16Array.from({ length: 37 }, (_, i) => i * 1777))],
    ["Q8_0", T.Q8_0, () => randomBlocks(T.Q8_0, 513, 11)],
    ["Q4_K", T.Q4_K, () => randomBlocks(T.Q4_K, 65, 12)],
    ["Q6_K", T.Q6_K, () => randomBlocks(T.Q6_K, 65, 13)],
    ["MXFP4", T.MXFP4, () => randomBlocks(T.MXFP4, 513, 14)],
    ["Q4_0", T.Q4_0, () => randomBlocks(T.Q4_0, 257, 15)],
    ["Q4_1", T.Q4_1, () => randomBlocks(T.Q4_1, 257, 16)],
    ["Q5_0", T.Q5_0, () => randomBlocks(T.Q5_0, 257, 17)],
    ["Q5_1", T.Q5_1, () => randomBlocks(T.Q5_1, 257, 18)],
    ["Q5_K", T.Q5_K, () => randomBlocks(T.Q5_K, 33, 19)],
    ["IQ4_NL", T.IQ4_NL, () => randomBlocks(T.IQ4_NL, 257, 20)],
    ["IQ4_XS", T.IQ4_XS, () => randomBlocks(T.IQ4_XS, 33, 21)],
  ];
  for (const [label, type, make] of cases) {
    it(label, (ctx) => {
      if (!available) ctx.skip();
      expect(backendInfo().nativeTypes).toContain(type);
      const input = make();
      const layout = ggmlTypeInfo(type);
      const n = (input.byteLength / layout.typeSize) * layout.blockSize;
      setBackend("auto");
      nativeAddon()?.setIsa(isa);
      const native = toF32Into(type, input, new Float32Array(n), n);
      const js = toF32IntoJs(type, input, new Float32Array(n), n);
      expect(Buffer.from(bytesOf(native)).equals(Buffer.from(bytesOf(js)))).toBe(true);
      // Unaligned source views take the same path.
      const shifted = new Uint8Array(input.byteLength + 1);
      shifted.set(input, 1);
      const fromUnaligned = toF32Into(type, shifted.subarray(1), new Float32Array(n), n);
      expect(Buffer.from(bytesOf(fromUnaligned)).equals(Buffer.from(bytesOf(js)))).toBe(true);
      nativeAddon()?.setIsa("auto");
    });
  }
});

describe("native position-grid resample", () => {
  const sizes = [
    { embedding: 1024, srcHeight: 16, srcWidth: 16, dstHeight: 24, dstWidth: 24 },
    { embedding: 37, srcHeight: 9, srcWidth: 7, dstHeight: 13, dstWidth: 11 },
    { embedding: 5, srcHeight: 12, srcWidth: 12, dstHeight: 5, dstWidth: 8 },
    { embedding: 3, srcHeight: 1, srcWidth: 6, dstHeight: 1, dstWidth: 1 },
  ];
  for (const o of sizes) {
    it(`gives the JS kernel's bits: ${o.embedding} x ${o.srcHeight}x${o.srcWidth} -> ${o.dstHeight}x${o.dstWidth}`, (ctx) => {
      if (!available || nativeAddon()?.resampleGrid === undefined) ctx.skip();
      const grid = Float32Array.from({ length: o.embedding * o.srcHeight * o.srcWidth }, (_, i) => Math.sin(i * 0.37) * 100 + (i % 7) * 1e-3);
      setBackend("js");
      const js = resamplePositionGrid(grid, o);
      setBackend("auto");
      const native = resamplePositionGrid(grid, o);
      expect(Buffer.from(bytesOf(native)).equals(Buffer.from(bytesOf(js)))).toBe(true);
    });
  }
  it("refuses arrays of the wrong size instead of reading past them", (ctx) => {
    const addon = nativeAddon();
    if (!available || addon?.resampleGrid === undefined) ctx.skip();
    expect(() => addon!.resampleGrid!(new Float32Array(3), new Float32Array(4), 1, 2, 2, 2, 2)).toThrow(RangeError);
    expect(() => addon!.resampleGrid!(new Float32Array(4), new Float32Array(4), 1, 2, 2, 0, 2)).toThrow(RangeError);
  });
});

describe("large buffers (largeBytes)", () => {
  it("gives zero-filled, writable memory of exactly the length asked, from the addon when large", (ctx) => {
    const addon = nativeAddon();
    if (!available || addon?.largeBuffer === undefined) ctx.skip();
    // below, at and above the size that goes to the addon, and lengths that are no whole huge page
    for (const length of [1, 4096, (1 << 20) - 1, 1 << 20, (4 << 20) - 1, 4 << 20, (5 << 20) + 3, 9 << 20]) {
      const b = largeBytes(length);
      expect(b.length).toBe(length);
      expect(b.buffer.byteLength).toBe(length);
      expect(b.every((x) => x === 0)).toBe(true);
      b.fill(0xa5);
      expect(b[0]).toBe(0xa5);
      expect(b[length - 1]).toBe(0xa5);
    }
    const raw = addon!.largeBuffer!(3 << 20)!;
    expect(raw.byteLength).toBe(3 << 20);
    expect(() => addon!.largeBuffer!(0)).toThrow(RangeError);
    expect(() => addon!.largeBuffer!(-1)).toThrow(RangeError);
    expect(() => addon!.largeBuffer!(1.5)).toThrow(RangeError);
  });

  it("without the addon, is a plain Uint8Array", () => {
    setBackend("js");
    try {
      const b = largeBytes(5 << 20);
      expect(b.length).toBe(5 << 20);
      expect(b.every((x) => x === 0)).toBe(true);
    } finally {
      setBackend("auto");
    }
  });

  it("a whole-tensor conversion into it gives the JS kernel's bits (an F16 tensor of 3 Mi elements)", () => {
    const n = 3 << 20;
    const src = new Uint8Array(n * 2);
    for (let i = 0; i < src.length; i++) src[i] = (i * 131 + (i >> 9)) & 0xff;
    const out = toF32(T.F16, src);
    expect(out.length).toBe(n);
    expect(out.buffer.byteLength).toBe(n * 4);
    const js = toF32IntoJs(T.F16, src, new Float32Array(n), n);
    expect(Buffer.from(bytesOf(out)).equals(Buffer.from(bytesOf(js)))).toBe(true);
  });
});

/** The parser's walk (@compat/gguf's walkShortItemsLE), written out: what the addon's must match. */
function walkJs(b: Uint8Array, q: number, i: number, n: number, stop: number): [number, number] {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  stop = Math.min(stop, b.length);
  while (i < n && q + 8 <= stop) {
    const len = dv.getUint32(q, true);
    const next = q + 8 + len;
    if (len >= 0x80 || next > stop || dv.getUint32(q + 4, true) !== 0) break;
    q = next;
    i++;
  }
  return [q, i];
}

describe("the string walk (walkShortStrings)", () => {
  it("stops where the parser's walk stops, at every start, count and end", (ctx) => {
    const walk = nativeStringWalk();
    if (!available || walk === undefined) ctx.skip();
    // items: a length prefix (short, long, a high word set) and that many bytes, cut anywhere
    const item = fc.oneof(
      fc.uint8Array({ maxLength: 0x7f }).map((s) => ({ len: s.length, hi: 0, s })),
      fc.uint8Array({ minLength: 0x80, maxLength: 0x90 }).map((s) => ({ len: s.length, hi: 0, s })),
      fc.record({ len: fc.nat(20), hi: fc.integer({ min: 1, max: 0xffffffff }) }).map(({ len, hi }) => ({ len, hi, s: new Uint8Array(len) })),
    );
    fc.assert(
      fc.property(fc.array(item, { maxLength: 40 }), fc.nat(), fc.nat(), fc.nat(), (items, a, b, c) => {
        const parts = items.map(({ len, hi, s }) => {
          const p = new Uint8Array(8 + s.length);
          new DataView(p.buffer).setUint32(0, len, true);
          new DataView(p.buffer).setUint32(4, hi, true);
          p.set(s, 8);
          return p;
        });
        const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
        parts.reduce((at, p) => (bytes.set(p, at), at + p.length), 0);
        const q0 = a % (bytes.length + 1);
        const n = b % (items.length + 2);
        const stop = c % (bytes.length + 9);
        const out = new Float64Array(2);
        walk!(bytes, q0, 0, n, stop, out);
        expect([out[0], out[1]]).toEqual(walkJs(bytes, q0, 0, n, stop));
      }),
      { numRuns: 500 },
    );
  });

  it("reads a header as the parser's own walk does (readGguf's walkStrings)", async (ctx) => {
    const walk = nativeStringWalk();
    if (!available || walk === undefined) ctx.skip();
    const words = Array.from({ length: 30_000 }, (_, i) => (i % 1001 === 0 ? `long${"ü".repeat(70)}${i}` : i % 3 === 0 ? `Ġw${i}é` : `t${i}`));
    const m = GgufModel.create();
    m.setString("general.architecture", "x");
    m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, words);
    m.setArray("tokenizer.ggml.merges", GgufValueType.STRING, words.slice(0, 9000).map((w, i) => `${w} ${words[i + 1]}`));
    const bytes = await serializeGguf(m);
    let calls = 0;
    const counted: typeof walk = (...args) => (calls++, walk!(...args));
    const viaAddon = await readGguf(bufferSource(bytes, "walk"), { initialChunk: 4096, walkStrings: counted });
    expect(calls).toBeGreaterThan(0);
    expect(viaAddon.getStringArray("tokenizer.ggml.tokens").join("\n") === words.join("\n")).toBe(true);
    expect(Buffer.compare(await serializeGguf(viaAddon), bytes)).toBe(0);
    expect(() => walk!(bytes, -1, 0, 1, 8, new Float64Array(2))).toThrow(RangeError);
    expect(() => walk!(bytes, 0, 0, 1, 8, new Float64Array(1))).toThrow(TypeError);
  });
});
