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
      // r0, its 24 zero padding bytes and r1 lie back to back in the source as in the output: one copy
      expect(calls).toEqual([1101]);
      expect(readFileSync(join(dir, "copied.gguf")).equals(readFileSync(join(dir, "plain.gguf")))).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("copies tensors one by one where the source's padding between them is not zeros", async () => {
    const { readGguf, layoutGguf } = await import("@compat/gguf");
    const { openSync, writeSync, closeSync, readFileSync } = await import("node:fs");
    const dir = await mkdtemp(join(tmpdir(), "gguf-copy-"));
    try {
      const path = await sourceFile(dir);
      const probe = await readGguf(path);
      const at = layoutGguf(probe).dataOffset + 1000;
      await probe.close();
      const fd = openSync(path, "r+");
      writeSync(fd, new Uint8Array(24).fill(0xee), 0, 24, at); // junk in the padding after r0
      closeSync(fd);
      const m = await readGguf(path);
      m.setString("general.name", "edited");
      const calls: number[] = [];
      await writeGguf(m, join(dir, "plain.gguf"));
      await writeGguf(m, join(dir, "copied.gguf"), { copyRange: kernelLikeCopier(calls) });
      await m.close();
      expect(calls).toEqual([1000, 77]);
      // the output's padding is zeros either way
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

describe("write-behind flushes", () => {
  it("keep running while a copier that finishes on the calling thread copies a long range", async () => {
    const { readGguf } = await import("@compat/gguf");
    const { open: openHandle } = await import("node:fs/promises");
    const { closeSync, openSync, ftruncateSync } = await import("node:fs");
    const dir = await mkdtemp(join(tmpdir(), "gguf-behind-"));
    // the flushes go through FileHandle#datasync: count the calls on the prototype
    const probe = await openHandle(join(dir, "probe"), "w");
    const proto = Object.getPrototypeOf(probe) as { datasync(): Promise<void> };
    await probe.close();
    const original = proto.datasync;
    let flushes = 0;
    proto.datasync = function (this: unknown) {
      flushes++;
      return original.call(this);
    };
    try {
      // a 320 MiB tensor over a sparse source: five write-behind stretches
      const size = 320 * 1024 * 1024;
      const data = join(dir, "zeros.bin");
      const fd = openSync(data, "w");
      ftruncateSync(fd, size);
      closeSync(fd);
      const src = GgufModel.create();
      src.setString("general.architecture", "x");
      const { fileSource } = await import("@compat/gguf");
      const zeros = await fileSource(data);
      src.addTensor({ name: "big", type: GgmlType.I8, shape: [size], data: { kind: "range", source: zeros, offset: 0, length: size } });
      await writeGguf(src, join(dir, "src.gguf"));
      await zeros.close?.();
      const m = await readGguf(join(dir, "src.gguf"));
      m.setString("general.name", "edited");
      flushes = 0;
      // like the native copy_file_range binding: it blocks this thread for the copy's duration
      // (40 ms a piece here) and is done before it returns, leaving no I/O on the thread pool
      const copyRange = (_srcFd: number, _srcOffset: number, dstFd: number, dstOffset: number, length: number) => {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 40);
        ftruncateSync(dstFd, dstOffset + length);
        return Promise.resolve(true);
      };
      await writeGguf(m, join(dir, "out.gguf"), { copyRange });
      await m.close();
      // one flush at a time; without turns of the event loop the first one is never seen to end
      expect(flushes).toBeGreaterThanOrEqual(2);
    } finally {
      proto.datasync = original;
      await rm(dir, { recursive: true, force: true });
    }
  });
});

/** A copier doing with read/write what copy_file_range does, recording each length. */
function kernelLikeCopier(calls: number[]) {
  return async (srcFd: number, srcOffset: number, dstFd: number, dstOffset: number, length: number): Promise<boolean> => {
    const { readSync, writeSync } = await import("node:fs");
    calls.push(length);
    const buf = Buffer.alloc(length);
    readSync(srcFd, buf, 0, length, srcOffset);
    writeSync(dstFd, buf, 0, length, dstOffset);
    return true;
  };
}

describe("layoutGguf shareBlocks (untouched ranges keep their place within a 4096-byte block)", () => {
  async function bigSource(dir: string): Promise<string> {
    const src = GgufModel.create();
    src.setString("general.architecture", "x");
    for (const [i, n] of [10_000, 333, 20_000].entries()) {
      src.addTensor({ name: `t${i}`, type: GgmlType.I8, shape: [n], data: { kind: "bytes", bytes: new Uint8Array(n).map((_, j) => (j * 7 + i) & 0xff) } });
    }
    const path = join(dir, "big.gguf");
    await writeGguf(src, path);
    return path;
  }

  it("an unchanged model gets no padding entry: the layout is the source's", async () => {
    const { readGguf, layoutGguf } = await import("@compat/gguf");
    const { readFileSync } = await import("node:fs");
    const dir = await mkdtemp(join(tmpdir(), "gguf-share-"));
    try {
      const path = await bigSource(dir);
      const m = await readGguf(path);
      const layout = layoutGguf(m, { shareBlocks: true });
      await m.close();
      expect(Buffer.from(layout.header).equals(readFileSync(path).subarray(0, layout.dataOffset))).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("an edited header is padded with a PADDING_KEY entry so the data section keeps the source's block offset", async () => {
    const { readGguf, layoutGguf, PADDING_KEY, SHARE_BLOCK, GgufValueType } = await import("@compat/gguf");
    const dir = await mkdtemp(join(tmpdir(), "gguf-share-"));
    try {
      const path = await bigSource(dir);
      const m = await readGguf(path);
      const srcData = layoutGguf(m).dataOffset;
      m.setString("general.name", "edited");
      const plain = layoutGguf(m);
      const shared = layoutGguf(m, { shareBlocks: true });
      expect(plain.dataOffset % SHARE_BLOCK).not.toBe(srcData % SHARE_BLOCK);
      expect(shared.dataOffset % SHARE_BLOCK).toBe(srcData % SHARE_BLOCK);
      expect(shared.tensorOffsets).toEqual(plain.tensorOffsets);
      await writeGguf(m, join(dir, "plain.gguf"));
      await writeGguf(m, join(dir, "shared.gguf"), { shareBlocks: true });
      await m.close();

      const a = await readGguf(join(dir, "plain.gguf"));
      const b = await readGguf(join(dir, "shared.gguf"));
      try {
        // the same keys plus the padding entry (zero bytes), the same tensors and bytes
        expect([...b].map((kv) => kv.key)).toEqual([...[...a].map((kv) => kv.key), PADDING_KEY]);
        const pad = b.get(PADDING_KEY)!;
        expect(pad.type).toBe(GgufValueType.ARRAY);
        expect(b.getArray(PADDING_KEY).itemType).toBe(GgufValueType.UINT8);
        expect((b.getArray(PADDING_KEY).toArray() as number[]).every((x) => x === 0)).toBe(true);
        for (const t of a.tensors) {
          const u = b.findTensor(t.name)!;
          expect(Buffer.from(await readBytes(u)).equals(Buffer.from(await readBytes(t)))).toBe(true);
        }
        // laying the padded file out again replaces its padding entry (it does not grow)
        const again = layoutGguf(b, { shareBlocks: true });
        expect(again.dataOffset).toBe(shared.dataOffset);
        expect(Buffer.from(again.header).equals(Buffer.from(shared.header))).toBe(true);
        // without shareBlocks a read-back model is written as it is, padding entry included
        expect(layoutGguf(b).dataOffset).toBe(shared.dataOffset);
      } finally {
        await a.close();
        await b.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

async function readBytes(t: GgufTensor): Promise<Uint8Array> {
  const { readTensorData } = await import("@compat/gguf");
  return readTensorData(t);
}

describe("writeGguf to a path that exists", () => {
  it("replaces a file, and a FIFO without waiting for a writer on it", async () => {
    const { execFileSync } = await import("node:child_process");
    const { readFileSync, writeFileSync, lstatSync } = await import("node:fs");
    const dir = await mkdtemp(join(tmpdir(), "gguf-replace-"));
    try {
      const expected = Buffer.from(await serializeGguf(model()));
      const file = join(dir, "old.gguf");
      writeFileSync(file, new Uint8Array(1 << 20).fill(5));
      await writeGguf(model(), file);
      expect(readFileSync(file).equals(expected)).toBe(true);
      const fifo = join(dir, "fifo.gguf");
      execFileSync("mkfifo", [fifo]);
      await writeGguf(model(), fifo);
      expect(lstatSync(fifo).isFile()).toBe(true);
      expect(readFileSync(fifo).equals(expected)).toBe(true);
      expect((await readdir(dir)).sort()).toEqual(["fifo.gguf", "old.gguf"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
