// Outputs on ext4 are written with O_DIRECT in aligned blocks (@compat/files' writeFileAtomic)
// instead of copied in the kernel: the same bytes as the page-cache path, the page-cache path
// where O_DIRECT is refused or not worth it, nothing left behind by a failure, and a
// translation written that way loads in real llama.cpp.
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rm, statfs, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DIRECT_MIN, kernelRangeCopier, type RangeCopier } from "@compat/files";
import { GgmlType, GgufModel, readGguf, writeGguf, type WriteOptions } from "@compat/gguf";
import { translate } from "@compat/handlers";
import { alignedBytes, nativeFileCopy } from "@compat/tensor-ops";
import { runLoaderInSubprocess, writeWideFixture } from "@compat/testkit";
import { describe, expect, it } from "vitest";
import { f32Bytes, tempDir } from "./helpers";

const dir = tempDir();
const kernel = kernelRangeCopier(nativeFileCopy());
const EXT4 = 0xef53;
const TMPFS = 0x01021994;

/**
 * A source file of F32 tensors, read back so they are ranges of it (20 MB: more than a direct
 * block), then a computed tensor (`produce`), one in memory, and a last one whose odd length
 * leaves the file's end off a 4096-byte boundary: together more than DIRECT_MIN bytes.
 */
async function fixture(d: string, produce: () => Promise<Uint8Array> = async () => f32Bytes(300_001, 9)): Promise<GgufModel> {
  const src = GgufModel.create();
  src.setString("general.architecture", "llama");
  for (let i = 0; i < 5; i++) src.addTensor({ name: `r${i}`, type: GgmlType.F32, shape: [1_000_003 + i * 77], data: { kind: "bytes", bytes: f32Bytes(1_000_003 + i * 77, i) } });
  const path = join(d, "source.gguf");
  await writeGguf(src, path);
  const m = await readGguf(path);
  m.addTensor({ name: "bytes", type: GgmlType.F32, shape: [333], data: { kind: "bytes", bytes: f32Bytes(333, 7) } });
  m.addTensor({ name: "computed", type: GgmlType.F32, shape: [300_001], data: { kind: "computed", length: 300_001 * 4, label: "fill", produce } }, { after: "r4" });
  m.addTensor({ name: "tail", type: GgmlType.I8, shape: [4099], data: { kind: "bytes", bytes: new Uint8Array(4099).fill(3) } });
  return m;
}

/** The copier, counting the ranges it was asked for. */
function counted(): { copier: RangeCopier; asked: () => number } {
  let n = 0;
  return {
    copier: async (...a) => (n++, kernel!(...a)),
    asked: () => n,
  };
}

async function write(m: GgufModel, out: string, opts: WriteOptions): Promise<Uint8Array> {
  await writeGguf(m, out, opts);
  return new Uint8Array(await readFile(out));
}

const fsType = async (d: string) => (await statfs(d)).type;

describe.skipIf(kernel === undefined || alignedBytes(4096) === undefined)("direct writes (O_DIRECT in aligned blocks)", () => {
  it("writes the bytes the page-cache path writes, without asking the kernel to copy, on ext4", async () => {
    const d = await dir();
    const m = await fixture(d);
    try {
      const old = counted();
      const before = await write(m, join(d, "page-cache.gguf"), { copyRange: old.copier });
      expect(before.length).toBeGreaterThan(DIRECT_MIN);
      expect(before.length % 4096, "an unaligned tail").not.toBe(0);
      expect(old.asked()).toBeGreaterThan(0);
      const now = counted();
      const tee: Uint8Array[] = [];
      const after = await write(m, join(d, "direct.gguf"), { copyRange: now.copier, alignedBytes, tee: (c) => void tee.push(c.slice()) });
      expect(Buffer.compare(after, before)).toBe(0);
      if ((await fsType(d)) === EXT4) {
        expect(now.asked(), "ranges are read into the blocks, not copied in the kernel").toBe(0);
        // every byte passed the tee once, in order (what migrate hashes)
        expect(Buffer.compare(Buffer.concat(tee), before)).toBe(0);
      }
    } finally {
      await m.close();
    }
  });

  it("goes through the page cache where the memory is not fit for O_DIRECT (EINVAL on the write)", async () => {
    const d = await dir();
    const m = await fixture(d);
    try {
      const expected = await write(m, join(d, "expected.gguf"), {});
      // one byte past an aligned start: every direct write is refused
      const misaligned = (n: number) => alignedBytes(n + 4096)!.subarray(1, n + 1);
      const out = join(d, "misaligned.gguf");
      expect(Buffer.compare(await write(m, out, { copyRange: kernel!, alignedBytes: misaligned }), expected)).toBe(0);
      // and the next output, with fit memory, still matches (refused blocks are not kept for it)
      expect(Buffer.compare(await write(m, join(d, "after.gguf"), { copyRange: kernel!, alignedBytes }), expected)).toBe(0);
    } finally {
      await m.close();
    }
  });

  it.skipIf(!existsSync("/dev/shm"))("keeps the page-cache path on tmpfs", async () => {
    if ((await fsType("/dev/shm")) !== TMPFS) return;
    const d = await dir();
    const m = await fixture(d);
    const shm = join("/dev/shm", `compat-direct-${process.pid}.gguf`);
    try {
      const expected = await write(m, join(d, "expected-shm.gguf"), {});
      const c = counted();
      expect(Buffer.compare(await write(m, shm, { copyRange: c.copier, alignedBytes }), expected)).toBe(0);
      expect(c.asked(), "the kernel copied the ranges").toBeGreaterThan(0);
    } finally {
      await m.close();
      await rm(shm, { force: true });
    }
  });

  it("leaves no output and no temp file when the output fails midway, and an older file as it was", async () => {
    const d = await dir();
    const sub = join(d, "failing");
    await mkdir(sub);
    const m = await fixture(d, async () => {
      throw new Error("the op failed");
    });
    try {
      const out = join(sub, "out.gguf");
      await expect(write(m, out, { copyRange: kernel!, alignedBytes })).rejects.toThrow(/the op failed/);
      expect(await readdir(sub)).toEqual([]);
      await writeFile(out, "older");
      await expect(write(m, out, { copyRange: kernel!, alignedBytes })).rejects.toThrow(/the op failed/);
      expect(await readdir(sub)).toEqual(["out.gguf"]);
      expect(await readFile(out, "utf8")).toBe("older");
    } finally {
      await m.close();
    }
  });

  it("names the source when it was cut short midway, and leaves no output and no temp file", async () => {
    const d = await dir();
    const sub = join(d, "truncated");
    await mkdir(sub);
    const m = await fixture(sub);
    try {
      await truncate(join(sub, "source.gguf"), 10_000_000);
      await expect(write(m, join(sub, "out.gguf"), { copyRange: kernel!, alignedBytes })).rejects.toMatchObject({ code: "TRUNCATED" });
      expect(await readdir(sub)).toEqual(["source.gguf"]);
    } finally {
      await m.close();
    }
  });

  it("writes a translation that real llama.cpp loads", async () => {
    const d = await dir();
    const blob = await writeWideFixture(join(d, "wide"));
    const view = (await translate(blob))!;
    expect(view.size).toBeGreaterThan(DIRECT_MIN);
    const out = join(d, "wide-translated.gguf");
    await view.writeTo(out);
    const viewBytes = await view.read(0, view.size);
    await view.close();
    expect(Buffer.compare(new Uint8Array(await readFile(out)), viewBytes)).toBe(0);
    const load = await runLoaderInSubprocess(out, { maxTokens: 4 });
    expect(load.ok ? load.tokens.length : load.error).toBeGreaterThan(0);
  });
});
