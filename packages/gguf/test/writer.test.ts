import { Writable } from "node:stream";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GgmlType, GgufModel, bufferSource, serializeGguf, writeGguf, type GgufTensor } from "@compat/gguf";
import { COPY_CHUNK } from "../src/tensor-data";

function model(): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "x");
  m.setU32("general.alignment", 64);
  m.addTensor({ name: "a", type: GgmlType.F32, shape: [5], data: { kind: "bytes", bytes: new Uint8Array(20).fill(1) } });
  m.addTensor({ name: "b", type: GgmlType.I8, shape: [3], data: { kind: "computed", length: 3, label: "three", produce: async () => new Uint8Array([7, 8, 9]) } });
  return m;
}

describe("writeGguf targets", () => {
  it("writes to a Node Writable, a WritableStream and a plain sink identically", async () => {
    const expected = await serializeGguf(model());
    const nodeChunks: Buffer[] = [];
    const w = new Writable({
      highWaterMark: 4,
      write(chunk, _enc, cb) {
        nodeChunks.push(Buffer.from(chunk));
        setTimeout(cb, 1);
      },
    });
    await writeGguf(model(), w);
    expect(new Uint8Array(Buffer.concat(nodeChunks))).toEqual(expected);

    const webChunks: Uint8Array[] = [];
    await writeGguf(model(), new WritableStream<Uint8Array>({ write: (c) => void webChunks.push(c.slice()) }));
    expect(new Uint8Array(Buffer.concat(webChunks))).toEqual(expected);

    const sinkChunks: Uint8Array[] = [];
    const progress: number[] = [];
    const res = await writeGguf(model(), { write: async (c: Uint8Array) => void sinkChunks.push(c.slice()) }, { onProgress: (n) => progress.push(n) });
    expect(new Uint8Array(Buffer.concat(sinkChunks))).toEqual(expected);
    expect(res.bytesWritten).toBe(expected.length);
    expect(progress.at(-1)).toBe(expected.length);
  });

  it("copies large source ranges in bounded chunks", async () => {
    const size = COPY_CHUNK * 2 + 100;
    const src = new Uint8Array(size).map((_, i) => i & 0xff);
    const reads: number[] = [];
    const inner = bufferSource(src);
    const t: GgufTensor = {
      name: "big",
      type: GgmlType.I8,
      shape: [size],
      data: { kind: "range", source: { name: "spy", size, read: (o, l) => (reads.push(l), inner.read(o, l)) }, offset: 0, length: size },
    };
    const m = GgufModel.create();
    m.addTensor(t);
    let maxChunk = 0;
    await writeGguf(m, { write: (c: Uint8Array) => void (maxChunk = Math.max(maxChunk, c.length)) });
    expect(Math.max(...reads)).toBeLessThanOrEqual(COPY_CHUNK);
    expect(maxChunk).toBeLessThanOrEqual(COPY_CHUNK);
  });

  it("aborts on signal and leaves no temp file", async () => {
    const dir = await mkdtemp(join(tmpdir(), "gguf-abort-"));
    try {
      const ac = new AbortController();
      ac.abort();
      await expect(writeGguf(model(), join(dir, "x.gguf"), { signal: ac.signal })).rejects.toThrow();
      expect(await readdir(dir)).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("writeGguf copyRange hook (in-kernel copies of untouched file ranges)", () => {
  async function sourceFile(dir: string): Promise<string> {
    const src = GgufModel.create();
    src.setString("general.architecture", "x");
    src.addTensor({ name: "r0", type: GgmlType.I8, shape: [1000], data: { kind: "bytes", bytes: new Uint8Array(1000).map((_, i) => i & 0xff) } });
    src.addTensor({ name: "r1", type: GgmlType.I8, shape: [77], data: { kind: "bytes", bytes: new Uint8Array(77).fill(3) } });
    const path = join(dir, "src.gguf");
    await writeGguf(src, path);
    return path;
  }

  it("hands range tensors to the copier with the right offsets and gets the same file", async () => {
    const { readGguf } = await import("@compat/gguf");
    const { readSync, writeSync, readFileSync } = await import("node:fs");
    const dir = await mkdtemp(join(tmpdir(), "gguf-copy-"));
    try {
      const m = await readGguf(await sourceFile(dir));
      m.setString("general.name", "edited"); // header grows: every tensor moves
      m.addTensor({ name: "mem", type: GgmlType.I8, shape: [5], data: { kind: "bytes", bytes: new Uint8Array(5).fill(1) } });
      const calls: number[] = [];
      await writeGguf(m, join(dir, "plain.gguf"));
      await writeGguf(m, join(dir, "copied.gguf"), {
        copyRange: async (srcFd, srcOffset, dstFd, dstOffset, length) => {
          calls.push(length);
          const buf = Buffer.alloc(length);
          readSync(srcFd, buf, 0, length, srcOffset);
          writeSync(dstFd, buf, 0, length, dstOffset);
          return true;
        },
      });
      await m.close();
      expect(calls).toEqual([1000, 77]);
      expect(readFileSync(join(dir, "copied.gguf")).equals(readFileSync(join(dir, "plain.gguf")))).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("falls back to copying through memory, and stops asking, once the copier declines", async () => {
    const { readGguf } = await import("@compat/gguf");
    const { readFileSync } = await import("node:fs");
    const dir = await mkdtemp(join(tmpdir(), "gguf-copy-"));
    try {
      const m = await readGguf(await sourceFile(dir));
      let calls = 0;
      await writeGguf(m, join(dir, "plain.gguf"));
      await writeGguf(m, join(dir, "declined.gguf"), { copyRange: async () => (calls++, false) });
      await m.close();
      expect(calls).toBe(1);
      expect(readFileSync(join(dir, "declined.gguf")).equals(readFileSync(join(dir, "plain.gguf")))).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
