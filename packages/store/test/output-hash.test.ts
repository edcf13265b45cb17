// OutputHasher: the digest of a file's pieces, told in output order while it is written, equals
// the sha256 of the file written, for random layouts of bytes and copied source ranges (with
// copies the copier declines), and through @compat/gguf's writer as migrate drives it; several
// outputs written at once on one HashingThread (migrate's) each get the digest of their own file.
import { createHash, randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { closeSync, openSync, readSync, writeSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeFileAtomic, type RangeCopier } from "@compat/files";
import { GgmlType, GgufModel, readGguf, writeGguf } from "@compat/gguf";
import { HashingThread, hashFile, OutputHasher } from "../src/index";

let dir: string;
let source: string;
let sourceBytes: Buffer;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-output-hash-"));
  source = join(dir, "source.bin");
  sourceBytes = randomBytes(3 << 20);
  await writeFile(source, sourceBytes);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A copier through pread/pwrite (what the kernel call does, in JS); `decline` refuses before any byte. */
function jsCopier(decline: () => boolean): RangeCopier {
  return async (srcFd, srcOffset, dstFd, dstOffset, length) => {
    if (decline()) return false;
    const buf = Buffer.alloc(length);
    expect(readSync(srcFd, buf, 0, length, srcOffset)).toBe(length);
    writeSync(dstFd, buf, 0, length, dstOffset);
    return true;
  };
}

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

describe("OutputHasher", () => {
  it("hashes random layouts of written bytes and copied ranges as the file they make", async () => {
    const piece = fc.oneof(
      fc.record({ kind: fc.constant("bytes" as const), bytes: fc.uint8Array({ minLength: 0, maxLength: 5000 }) }),
      fc
        .record({ kind: fc.constant("range" as const), offset: fc.nat({ max: (3 << 20) - 1 }), length: fc.nat({ max: 1 << 20 }), declined: fc.boolean() })
        .map((r) => ({ ...r, length: Math.min(r.length, (3 << 20) - r.offset) })),
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(piece, { maxLength: 12 }), async (pieces) => {
        const out = join(dir, `out-${run++}.bin`);
        const fd = openSync(source, "r");
        const hasher = new OutputHasher();
        try {
          let declineNext = false;
          const copier = hasher.copier(jsCopier(() => declineNext));
          await writeFileAtomic(out, async ({ write, copyRange }) => {
            for (const p of pieces) {
              if (p.kind === "range") {
                declineNext = p.declined;
                if (await copyRange(copier, fd, p.offset, p.length)) continue;
              }
              // bytes, or a declined range written through memory as the writer falls back
              const chunk = p.kind === "bytes" ? p.bytes : sourceBytes.subarray(p.offset, p.offset + p.length);
              await hasher.bytes(chunk);
              await write(chunk);
            }
          });
          const got = await hasher.digest();
          const written = await readFile(out);
          expect(got).toEqual({ hex: sha256(written), size: written.length });
        } finally {
          await hasher.close();
          closeSync(fd);
          await rm(out, { force: true });
        }
      }),
      { numRuns: 40 },
    );
  });

  it("backs the writer off while its backlog is large, and still hashes every chunk", async () => {
    const hasher = new OutputHasher();
    const whole = createHash("sha256");
    const chunk = new Uint8Array(8 << 20);
    for (let i = 0; i < 24; i++) {
      chunk.fill(i); // the writer reuses its buffer once bytes() resolves
      whole.update(chunk);
      await hasher.bytes(chunk);
    }
    expect(await hasher.digest()).toEqual({ hex: whole.digest("hex"), size: 24 * chunk.length });
  });

  it("fails the digest when a range reaches past its source's end", async () => {
    const fd = openSync(source, "r");
    const hasher = new OutputHasher();
    try {
      hasher.range(fd, sourceBytes.length - 10, 20);
      await expect(hasher.digest()).rejects.toThrow(/source ended/);
    } finally {
      await hasher.close();
      closeSync(fd);
    }
  });

  it("gives @compat/gguf's writer (tee + wrapped copier) the digest of the GGUF it writes", async () => {
    // a GGUF whose tensors are ranges of a file, then the same model with a tensor in memory and one computed
    const m = GgufModel.create();
    m.setString("general.architecture", "llama");
    for (let i = 0; i < 4; i++) m.addTensor({ name: `r${i}`, type: GgmlType.F32, shape: [1000 + i * 77], data: { kind: "bytes", bytes: randomBytes((1000 + i * 77) * 4) } });
    const base = join(dir, "base.gguf");
    await writeGguf(m, base);
    const read = await readGguf(base);
    try {
      read.addTensor({ name: "b", type: GgmlType.F32, shape: [33], data: { kind: "bytes", bytes: randomBytes(33 * 4) } });
      read.addTensor({ name: "c", type: GgmlType.F32, shape: [5000], data: { kind: "computed", length: 20000, label: "fill", produce: async () => new Uint8Array(20000).fill(9) } });
      for (const declined of [false, true]) {
        const out = join(dir, `gguf-${declined}.gguf`);
        const hasher = new OutputHasher();
        let copied = 0;
        const inner = jsCopier(() => declined);
        const copier: RangeCopier = async (...args) => {
          const ok = await inner(...args);
          if (ok) copied++;
          return ok;
        };
        await writeGguf(read, out, { copyRange: hasher.copier(copier), tee: (c) => hasher.bytes(c), shareBlocks: true });
        expect(copied > 0).toBe(!declined);
        expect(await hasher.digest()).toEqual(await hashFile(out));
      }
    } finally {
      await read.close();
    }
  });

  it("hashes outputs written at once on one HashingThread, each as the file it makes", async () => {
    const thread = new HashingThread();
    const piece = fc.oneof(
      fc.record({ kind: fc.constant("bytes" as const), bytes: fc.uint8Array({ minLength: 0, maxLength: 3000 }) }),
      fc.record({ kind: fc.constant("range" as const), offset: fc.nat({ max: (2 << 20) - 1 }), length: fc.nat({ max: 1 << 20 }) }),
    );
    let run = 0;
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(fc.array(piece, { maxLength: 8 }), { minLength: 1, maxLength: 3 }), async (files) => {
          const fd = openSync(source, "r");
          const outs = files.map(() => join(dir, `shared-${run++}.bin`));
          try {
            // the writers interleave: each awaits a turn of the loop between its pieces
            const digests = await Promise.all(
              files.map(async (pieces, i) => {
                const hasher = thread.hasher();
                const copier = hasher.copier(jsCopier(() => false));
                await writeFileAtomic(outs[i]!, async ({ write, copyRange }) => {
                  for (const p of pieces) {
                    await new Promise<void>((resolve) => setImmediate(resolve));
                    if (p.kind === "range") expect(await copyRange(copier, fd, p.offset, p.length)).toBe(true);
                    else {
                      await hasher.bytes(p.bytes);
                      await write(p.bytes);
                    }
                  }
                });
                return hasher.digest();
              }),
            );
            for (const [i, out] of outs.entries()) {
              const written = await readFile(out);
              expect(digests[i]).toEqual({ hex: sha256(written), size: written.length });
            }
          } finally {
            closeSync(fd);
            for (const out of outs) await rm(out, { force: true });
          }
        }),
        { numRuns: 25 },
      );
    } finally {
      await thread.close();
    }
  });

  it("keeps one output's failure or close to itself on a shared thread; a closed thread fails the digests it owes", async () => {
    const thread = new HashingThread();
    const fd = openSync(source, "r");
    try {
      const bad = thread.hasher();
      const dropped = thread.hasher();
      const good = thread.hasher();
      bad.range(fd, sourceBytes.length - 10, 20);
      dropped.range(fd, 0, 1000);
      good.range(fd, 0, 1000);
      await good.bytes(sourceBytes.subarray(5, 50));
      const droppedDigest = dropped.digest().catch(() => undefined); // answered or refused, never left hanging
      await dropped.close();
      await expect(bad.digest()).rejects.toThrow(/source ended/);
      expect(await good.digest()).toEqual({ hex: sha256(Buffer.concat([sourceBytes.subarray(0, 1000), sourceBytes.subarray(5, 50)])), size: 1045 });
      await droppedDigest;
      const pending = thread.hasher();
      pending.range(fd, 0, 10);
      await thread.close();
      await expect(pending.digest()).rejects.toThrow(/stopped before the digest/);
      await expect(thread.hasher().digest()).rejects.toThrow(/stopped before the digest/);
    } finally {
      await thread.close();
      closeSync(fd);
    }
  });

  it("never keeps the process alive once no output is open on it", async () => {
    // a thread left unclosed: the process still ends after its last digest
    const module = join(__dirname, "../src/output-hash.ts");
    const script = `import { HashingThread } from ${JSON.stringify(module)};
const t = new HashingThread();
const h = t.hasher();
h.bytes(new Uint8Array([1, 2, 3]));
console.log((await h.digest()).hex);`;
    const file = join(dir, "unclosed.mts");
    await writeFile(file, script);
    const out = execFileSync(process.execPath, ["--import", "tsx", file], { encoding: "utf8", timeout: 120_000 });
    expect(out.trim()).toBe(sha256(new Uint8Array([1, 2, 3])));
  });

  it("hashes large written chunks carried in reused slabs, across outputs of one thread", async () => {
    const thread = new HashingThread();
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(fc.array(fc.integer({ min: 1, max: 9 << 20 }), { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 3 }), async (outputs) => {
          const writerBuffer = new Uint8Array(9 << 20); // the writer refills one buffer, as @compat/gguf's does
          for (const [o, sizes] of outputs.entries()) {
            const hasher = thread.hasher();
            const whole = createHash("sha256");
            let size = 0;
            for (const [i, n] of sizes.entries()) {
              const chunk = writerBuffer.subarray(0, n).fill((o * 31 + i * 7 + 1) & 0xff);
              chunk[n - 1] = i;
              whole.update(chunk);
              size += n;
              await hasher.bytes(chunk);
            }
            expect(await hasher.digest()).toEqual({ hex: whole.digest("hex"), size });
          }
        }),
        { numRuns: 8 },
      );
    } finally {
      await thread.close();
    }
  });
});
