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
