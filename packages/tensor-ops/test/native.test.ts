/** The native kernels must give exactly the JS kernels' bits on the same inputs. */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { GgmlType as T, ggmlTypeInfo } from "@compat/gguf";
import { activeBackend, backendInfo, largeBytes, resamplePositionGrid, setBackend, toF32, toF32Into } from "../src/index";
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
    for (const length of [1, 4096, (4 << 20) - 1, 4 << 20, (5 << 20) + 3, 9 << 20]) {
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
