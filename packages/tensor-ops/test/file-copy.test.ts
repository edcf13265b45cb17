// The in-kernel range copier (@compat/files' copy loop over copy_file_range through the addon): bytes land where asked,
// the kernel's refusals fall back (false), and a source shorter than promised throws.
import { openSync, closeSync, readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { statfs } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FilesError, kernelRangeCopier as rangeCopierOver } from "@compat/files";
import { nativeFileCopy } from "../src/index";
import { cloneFileRange, nativeAvailable } from "../src/native";

/** @compat/files' copy loop over this package's kernel call, as every writer gets it. */
const kernelRangeCopier = () => rangeCopierOver(nativeFileCopy());

const dir = mkdtempSync(join(tmpdir(), "tops-copy-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!nativeAvailable())("kernelRangeCopier", () => {
  const src = join(dir, "src.bin");
  const bytes = new Uint8Array(3 * 1024 * 1024 + 17).map((_, i) => (i * 131 + 7) & 0xff);
  writeFileSync(src, bytes);

  it("copies a range to an offset of another file, byte for byte", async () => {
    const copy = kernelRangeCopier()!;
    const dst = join(dir, "dst.bin");
    const fi = openSync(src, "r");
    const fo = openSync(dst, "w+");
    try {
      writeFileSync(fo, new Uint8Array(100).fill(9));
      expect(await copy(fi, 5, fo, 100, bytes.length - 5)).toBe(true);
    } finally {
      closeSync(fi);
      closeSync(fo);
    }
    const out = readFileSync(dst);
    expect(out.length).toBe(100 + bytes.length - 5);
    expect(out.subarray(0, 100).every((b) => b === 9)).toBe(true);
    expect(Buffer.compare(out.subarray(100), Buffer.from(bytes.subarray(5)))).toBe(0);
  });

  it("copies a range that sits at the same place within a block on both sides (head copied on its own)", async () => {
    const copy = kernelRangeCopier()!;
    const dst = join(dir, "same-offset.bin");
    const fi = openSync(src, "r");
    const fo = openSync(dst, "w+");
    try {
      writeFileSync(fo, new Uint8Array(4096 + 100).fill(9));
      expect(await copy(fi, 100, fo, 4096 + 100, bytes.length - 100)).toBe(true);
    } finally {
      closeSync(fi);
      closeSync(fo);
    }
    const out = readFileSync(dst);
    expect(out.length).toBe(4096 + bytes.length);
    expect(Buffer.compare(out.subarray(4096 + 100), Buffer.from(bytes.subarray(100)))).toBe(0);
  });

  it("declines (false) when the kernel refuses before copying, e.g. a read-only destination", async () => {
    const copy = kernelRangeCopier()!;
    const fi = openSync(src, "r");
    const fo = openSync(src, "r"); // not open for writing: EBADF
    try {
      expect(await copy(fi, 0, fo, 0, 10)).toBe(false);
    } finally {
      closeSync(fi);
      closeSync(fo);
    }
  });

  it("throws when the source ends before the promised length", async () => {
    const copy = kernelRangeCopier()!;
    const fi = openSync(src, "r");
    const fo = openSync(join(dir, "short.bin"), "w+");
    try {
      await expect(copy(fi, bytes.length - 10, fo, 0, 20)).rejects.toThrow(/source ended/);
      await expect(copy(fi, bytes.length - 10, fo, 0, 20)).rejects.toBeInstanceOf(FilesError);
    } finally {
      closeSync(fi);
      closeSync(fo);
    }
  });

  it("copies on the thread pool: the kernel call is a promise, with the synchronous call's results", async () => {
    const copy = nativeFileCopy()!;
    const dst = join(dir, "async.bin");
    const fi = openSync(src, "r");
    const fo = openSync(dst, "w+");
    try {
      const pending = copy(fi, 3, fo, 0, 1024 * 1024);
      expect(pending).toBeInstanceOf(Promise); // the event loop runs while the kernel copies
      expect(await pending).toBe(1024 * 1024);
      // the end of the source: fewer bytes, as the synchronous call reports them
      expect(await copy(fi, bytes.length - 10, fo, 1024 * 1024, 20)).toBe(10);
      // refused before the first byte: -errno (EBADF, the source opened for reading only as the destination)
      expect(await copy(fi, 0, fi, 0, 10)).toBe(-9);
    } finally {
      closeSync(fi);
      closeSync(fo);
    }
    const out = readFileSync(dst);
    expect(Buffer.compare(out.subarray(0, 1024 * 1024), Buffer.from(bytes.subarray(3, 3 + 1024 * 1024)))).toBe(0);
    expect(Buffer.compare(out.subarray(1024 * 1024), Buffer.from(bytes.subarray(bytes.length - 10)))).toBe(0);
  });

  it("copies many ranges at once, into one file and into two, byte for byte", async () => {
    // what a translation does: the text file's and the projector's copies (and their flushes) in flight together
    const copy = kernelRangeCopier()!;
    const piece = 256 * 1024;
    const a = join(dir, "many-a.bin");
    const b = join(dir, "many-b.bin");
    const fi = openSync(src, "r");
    const fa = openSync(a, "w+");
    const fb = openSync(b, "w+");
    try {
      const jobs: Promise<boolean>[] = [];
      for (let at = 0; at + piece <= bytes.length; at += piece) {
        jobs.push(copy(fi, at, fa, at, piece));
        jobs.push(copy(fi, at, fb, bytes.length - at - piece, piece)); // b gets the pieces in reverse order
      }
      expect(await Promise.all(jobs)).toEqual(jobs.map(() => true));
    } finally {
      closeSync(fi);
      closeSync(fa);
      closeSync(fb);
    }
    const n = Math.floor(bytes.length / piece) * piece;
    const outA = readFileSync(a);
    const outB = readFileSync(b);
    expect(Buffer.compare(outA, Buffer.from(bytes.subarray(0, n)))).toBe(0);
    for (let at = 0; at < n; at += piece) expect(Buffer.compare(outB.subarray(bytes.length - at - piece, bytes.length - at), Buffer.from(bytes.subarray(at, at + piece)))).toBe(0);
  });

  it("cloneFileRange reflinks or reports why not (ext4 and tmpfs refuse)", () => {
    const fi = openSync(src, "r");
    const fo = openSync(join(dir, "clone.bin"), "w+");
    try {
      const rc = cloneFileRange(fi, 0, fo, 0, 1024 * 1024);
      if (rc === 0) expect(Buffer.compare(readFileSync(join(dir, "clone.bin")), Buffer.from(bytes.subarray(0, 1024 * 1024)))).toBe(0);
      else expect(rc).toBeLessThan(0);
    } finally {
      closeSync(fi);
      closeSync(fo);
    }
  });
});

// A reflink-capable mount (XFS with reflink, Btrfs), e.g. a loop-mounted image: set COMPAT_REFLINK_DIR to it.
const reflinkDir = process.env.COMPAT_REFLINK_DIR;
describe.skipIf(!nativeAvailable() || reflinkDir === undefined)("on a reflink filesystem (COMPAT_REFLINK_DIR)", () => {
  it("clones block-aligned ranges, refuses unaligned ones, and copy_file_range gives the same bytes", async () => {
    const d = mkdtempSync(join(reflinkDir!, "tops-reflink-"));
    try {
      const src = join(d, "src.bin");
      const bytes = new Uint8Array(8 * 4096 * 64).map((_, i) => (i * 7 + 1) & 0xff);
      writeFileSync(src, bytes);
      const fi = openSync(src, "r");
      const fo = openSync(join(d, "clone.bin"), "w+");
      const fc = openSync(join(d, "copy.bin"), "w+");
      try {
        expect(cloneFileRange(fi, 4096, fo, 0, bytes.length - 4096)).toBe(0);
        expect(cloneFileRange(fi, 4096 + 32, fo, 0, 4096)).toBeLessThan(0);
        expect(await kernelRangeCopier()!(fi, 4096, fc, 0, bytes.length - 4096)).toBe(true);
        // an unaligned start at the same place within a block on both sides: the rest is still shared
        const fs2 = openSync(join(d, "shared.bin"), "w+");
        try {
          const before = await statfs(d);
          expect(await kernelRangeCopier()!(fi, 100, fs2, 100, bytes.length - 100)).toBe(true);
          const after = await statfs(d);
          expect((before.bfree - after.bfree) * before.bsize).toBeLessThan(bytes.length / 4);
        } finally {
          closeSync(fs2);
        }
      } finally {
        closeSync(fi);
        closeSync(fo);
        closeSync(fc);
      }
      const want = Buffer.from(bytes.subarray(4096));
      expect(readFileSync(join(d, "clone.bin")).equals(want)).toBe(true);
      expect(readFileSync(join(d, "copy.bin")).equals(want)).toBe(true);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
