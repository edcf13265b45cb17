import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, open, readFile, readdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { fileDigest, startLlamaServer, writeWideFixture } from "@compat/testkit";
import {
  EROFS_BLOCK,
  EROFS_CHUNK,
  EROFS_READ_AHEAD_KB,
  FuseMount,
  mountErofs,
  probeErofs,
  planView,
  wholeFilePlan,
  writeErofsImage,
  type ErofsFile,
  type ErofsMount,
  type Extent,
  type FilePlan,
} from "@compat/mount";
import { viewsOf } from "./helpers";

const made: string[] = [];
const mounts: ErofsMount[] = [];
afterAll(async () => {
  for (const m of mounts) await m.close().catch(() => undefined);
  for (const d of made) await rm(d, { recursive: true, force: true });
});
async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "compat-erofs-"));
  made.push(d);
  return d;
}

/** A plan of `extents` over the device files `devices`, as planView would make one (their identity as they are now). */
async function planOf(devices: string[], memory: Uint8Array, extents: Extent[]): Promise<FilePlan> {
  const size = extents.reduce((n, x) => n + x.length, 0);
  const sources = await Promise.all(
    devices.map(async (path) => {
      const st = await stat(path, { bigint: true }).catch(() => undefined);
      return { path, dev: st?.dev ?? 0n, ino: st?.ino ?? 0n, size: Number(st?.size ?? 0n), mtimeNs: st?.mtimeNs ?? 0n };
    }),
  );
  return { size, mtimeNs: 1_700_000_000_123_456_789n, memory, sources, sidecars: [], extents };
}

/** The bytes a plan describes, built here from its pieces. */
function expected(plan: FilePlan, devices: Buffer[]): Buffer {
  return Buffer.concat(
    plan.extents.map((x) =>
      x.kind === "zero" ? Buffer.alloc(x.length) : x.kind === "memory" ? Buffer.from(plan.memory.subarray(x.offset, x.offset + x.length)) : x.kind === "source" ? devices[x.source]!.subarray(x.offset, x.offset + x.length) : Buffer.alloc(0),
    ),
  );
}

/** Each planned file with a `whole` file written in `dir`: its bytes (expected), padded to a whole block. */
async function withWhole(dir: string, files: { name: string; plan: FilePlan }[], devices: Buffer[]): Promise<ErofsFile[]> {
  return Promise.all(
    files.map(async (f) => {
      const whole = join(dir, `whole-${f.name.replaceAll("/", "_")}`);
      const bytes = expected(f.plan, devices);
      await writeFile(whole, Buffer.concat([bytes, Buffer.alloc(wholeFilePlan(f.plan).size - bytes.length)]));
      return { ...f, whole };
    }),
  );
}

async function mountImage(files: ErofsFile[], dir: string): Promise<{ mount: ErofsMount; ranges: number; whole: number }> {
  const image = await writeErofsImage(join(dir, "image.erofs"), files);
  const mnt = join(dir, "mnt");
  await mkdir(mnt, { recursive: true });
  const mount = await mountErofs(join(dir, "image.erofs"), mnt, image.devices);
  mounts.push(mount);
  return { mount, ranges: image.ranges, whole: image.whole };
}

/**
 * Random files over two device files written in `dir` (dev0's last block partial): each a list of
 * pieces, memory, zeros or a range of a device; ranges are often block-congruent and chunk-long.
 */
async function randomFiles(dir: string) {
  const devBytes = [randomBytes(5 * EROFS_CHUNK + 1234), randomBytes(3 * EROFS_CHUNK)];
  const devs = devBytes.map((_, i) => join(dir, `dev${i}`));
  for (const [i, b] of devBytes.entries()) await writeFile(devs[i]!, b);
  const memory = randomBytes(EROFS_CHUNK);
  const piece = fc.oneof(
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("memory" as const), offset: fc.nat(memory.length - 1), length: fc.integer({ min: 1, max: 70_000 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("zero" as const), length: fc.integer({ min: 1, max: 10_000 }) }) },
    {
      weight: 3,
      arbitrary: fc.record({ kind: fc.constant("source" as const), source: fc.nat(1), aligned: fc.boolean(), toEnd: fc.boolean(), start: fc.nat(), length: fc.oneof(fc.integer({ min: 1, max: 100_000 }), fc.integer({ min: EROFS_CHUNK, max: 3 * EROFS_CHUNK })) }),
    },
  );
  // a name that is a file and a folder ("m" and "m/x") cannot be drawn: these never clash
  const files = fc.array(fc.record({ name: fc.constantFrom("a", "b.gguf", "m/x.gguf", "m/y", "n/o/p"), pieces: fc.array(piece, { maxLength: 8 }) }), { minLength: 1, maxLength: 3 });
  type Drawn = typeof files extends fc.Arbitrary<infer T> ? T : never;
  const planned = (drawn: Drawn) =>
    Promise.all(
      [...new Map(drawn.map((f) => [f.name, f.pieces]))].map(async ([name, pieces]) => {
        const extents: Extent[] = [];
        let at = 0;
        for (const p of pieces) {
          if (p.kind === "memory") {
            const length = Math.min(p.length, memory.length - p.offset);
            extents.push({ kind: "memory", at, offset: p.offset, length });
            at += length;
          } else if (p.kind === "zero") {
            extents.push({ kind: "zero", at, length: p.length });
            at += p.length;
          } else {
            const size = devBytes[p.source]!.length;
            let length = Math.min(p.length, size);
            // toEnd: up to the device's last byte; aligned: the device offset ≡ the file offset
            // (mod the block), as translate's header padding makes them
            let offset = p.toEnd ? size - length : p.start % (size - length + 1);
            const skew = (((offset - at) % EROFS_BLOCK) + EROFS_BLOCK) % EROFS_BLOCK;
            if (p.aligned && p.toEnd) offset = Math.min(size - 1, offset + ((EROFS_BLOCK - skew) % EROFS_BLOCK));
            else if (p.aligned) offset = Math.max(0, offset - skew);
            if (p.toEnd) length = size - offset;
            extents.push({ kind: "source", at, source: p.source, offset, length });
            at += length;
          }
        }
        return { name, plan: await planOf(devs, memory, extents) };
      }),
    );
  return { devBytes, devs, files, planned };
}

/** erofs-utils' checker, a reader of the format that is not the kernel's, when it is installed. */
const fsckErofs = spawnSync("fsck.erofs", ["--help"], { stdio: "ignore" }).error === undefined;
if (!fsckErofs) console.warn("EROFS image check by fsck.erofs skipped: erofs-utils is not installed");

/** Whether `dir` is a mount point now (/proc/self/mountinfo). */
async function mounted(dir: string): Promise<boolean> {
  return (await readFile("/proc/self/mountinfo", "utf8")).split("\n").some((l) => l.split(" ")[4] === dir);
}

/** Whether this machine mounts EROFS images, found by mounting one (root, a kernel with file-backed EROFS and `directio`). */
const probed = await probeErofs(await tempDir());
const refused = probed.usable ? undefined : probed.reason;
if (refused !== undefined) console.warn(`EROFS mount tests skipped: ${refused}`);

describe("EROFS images of planned files", () => {
  it("refuses what the format cannot name: more devices than device_id's 16 bits", async () => {
    const n = 65_536;
    const extents: Extent[] = Array.from({ length: n }, (_, i) => ({ kind: "source", at: i * EROFS_CHUNK, source: i, offset: 0, length: EROFS_CHUNK }));
    const sources = Array.from({ length: n }, (_, i) => ({ path: `/nonexistent/${i}`, dev: 0n, ino: 0n, size: EROFS_CHUNK, mtimeNs: 0n }));
    const plan: FilePlan = { size: n * EROFS_CHUNK, mtimeNs: 0n, memory: new Uint8Array(), sources, sidecars: [], extents };
    const dir = await tempDir();
    await expect(writeErofsImage(join(dir, "x.erofs"), [{ name: "f", plan, whole: "/nonexistent/whole" }])).rejects.toMatchObject({ name: "MountError", code: "EROFS_UNSUPPORTED" });
    expect(await readdir(dir)).toEqual([]);
  });

  it("refuses names it cannot hold, and a plan that does not tile its file", async () => {
    const dir = await tempDir();
    const plan = await planOf([], new Uint8Array(4), [{ kind: "memory", at: 0, offset: 0, length: 4 }]);
    const whole = "/nonexistent/whole";
    for (const name of ["", "a//b", "..", "a/./b", "x".repeat(256)]) {
      await expect(writeErofsImage(join(dir, "x.erofs"), [{ name, plan, whole }]), name).rejects.toMatchObject({ code: "BAD_PLAN" });
    }
    await expect(writeErofsImage(join(dir, "x.erofs"), [{ name: "a", plan, whole }, { name: "a", plan, whole }])).rejects.toMatchObject({ code: "BAD_PLAN" });
    await expect(writeErofsImage(join(dir, "x.erofs"), [{ name: "a", plan, whole }, { name: "a/b", plan, whole }])).rejects.toMatchObject({ code: "BAD_PLAN" });
    await expect(writeErofsImage(join(dir, "x.erofs"), [{ name: "a", plan: { ...plan, size: 5 }, whole }])).rejects.toMatchObject({ code: "BAD_PLAN" });
    expect(await readdir(dir)).toEqual([]);
  });

  it("says why EROFS cannot be used, without a mount daemon", async () => {
    const dir = await tempDir();
    const probe = await probeErofs(dir, { ...process.env, OLLAMA_COMPAT_MOUNTD: join(dir, "no-such-daemon") });
    expect(probe).toMatchObject({ usable: false });
    expect(await readdir(dir)).toEqual([]);
  });

  it("refuses a device that is not the planned file any more, and a whole file shorter than the plan's blocks", async () => {
    const dir = await tempDir();
    const dev = join(dir, "blob");
    await writeFile(dev, Buffer.alloc(EROFS_CHUNK, 1));
    const plan = await planOf([dev], new Uint8Array(), [{ kind: "source", at: 0, source: 0, offset: 0, length: EROFS_CHUNK }]);
    // replaced as Ollama replaces a blob: another file renamed over it
    await writeFile(join(dir, "next"), Buffer.alloc(EROFS_CHUNK, 2));
    await rename(join(dir, "next"), dev);
    await expect(writeErofsImage(join(dir, "x.erofs"), [{ name: "f", plan, whole: join(dir, "whole") }])).rejects.toMatchObject({ code: "REJECTED" });
    // a computed tensor: read from the whole file, which must hold the plan's last block whole
    const sidecar: FilePlan = { ...plan, size: 100, sources: [], sidecars: [{ path: join(dir, "sidecar"), length: 100 }], extents: [{ kind: "sidecar", at: 0, sidecar: 0, offset: 0, length: 100 }] };
    const whole = join(dir, "whole");
    await expect(writeErofsImage(join(dir, "x.erofs"), [{ name: "f", plan: sidecar, whole }])).rejects.toMatchObject({ code: "BAD_PLAN" });
    await writeFile(whole, Buffer.alloc(100, 3));
    await expect(writeErofsImage(join(dir, "x.erofs"), [{ name: "f", plan: sidecar, whole }])).rejects.toMatchObject({ code: "BAD_PLAN" });
    await writeFile(whole, Buffer.alloc(EROFS_BLOCK, 3));
    expect(await writeErofsImage(join(dir, "x.erofs"), [{ name: "f", plan: sidecar, whole }])).toMatchObject({ devices: [whole], ranges: 0, whole: 1 });
  });

  it("points every chunk of a block-aligned range into its source, the others into their file's whole file: the image is metadata", async () => {
    const dir = await tempDir();
    const dev = join(dir, "blob");
    const size = 8 * EROFS_CHUNK + 3 * EROFS_BLOCK + 100;
    await writeFile(dev, Buffer.alloc(size, 7));
    // 4 chunks from a block boundary of the blob, then a header-sized memory piece shifts the rest off the blocks
    const plan = await planOf([dev], new Uint8Array(100), [
      { kind: "source", at: 0, source: 0, offset: 3 * EROFS_BLOCK, length: 4 * EROFS_CHUNK },
      { kind: "memory", at: 4 * EROFS_CHUNK, offset: 0, length: 100 },
      { kind: "source", at: 4 * EROFS_CHUNK + 100, source: 0, offset: 0, length: 2 * EROFS_CHUNK },
    ]);
    // up to the blob's end, whose last block is partial: the tail chunk would be read past it, so it is the whole file's
    const tail = await planOf([dev], new Uint8Array(), [{ kind: "source", at: 0, source: 0, offset: 6 * EROFS_CHUNK + 3 * EROFS_BLOCK, length: 2 * EROFS_CHUNK + 100 }]);
    const files = await withWhole(dir, [{ name: "m/f", plan }, { name: "t", plan: tail }], [await readFile(dev)]);
    const image = await writeErofsImage(join(dir, "x.erofs"), files);
    expect(image).toMatchObject({ devices: [dev, files[0]!.whole, files[1]!.whole], ranges: 6, whole: 4 });
    expect((await stat(join(dir, "x.erofs"))).size).toBe(image.bytes);
    expect(image.bytes).toBe(3 * EROFS_BLOCK); // superblock, inodes and chunk indexes; a block per folder (the root, m/)
  });
});

describe.skipIf(!fsckErofs)("EROFS images as erofs-utils reads them", () => {
  it("fsck.erofs checks the image and extracts each file as the concatenation of its pieces", async () => {
    const dir = await tempDir();
    const { devBytes, devs, files, planned: planFiles } = await randomFiles(dir);
    await fc.assert(
      fc.asyncProperty(files, async (drawn) => {
        const run = await mkdtemp(join(dir, "run-"));
        const planned = await withWhole(run, await planFiles(drawn), devBytes);
        const image = await writeErofsImage(join(run, "image.erofs"), planned);
        // erofs-utils numbers devices by the order of --device, as the mount does by device=
        const r = spawnSync("fsck.erofs", [...image.devices.map((d) => `--device=${d}`), `--extract=${join(run, "out")}`, join(run, "image.erofs")], { encoding: "utf8" });
        expect(r.status, r.stderr).toBe(0);
        for (const f of planned) expect((await readFile(join(run, "out", f.name))).equals(expected(f.plan, devBytes)), f.name).toBe(true);
        expect(image.devices.every((d) => devs.includes(d) || planned.some((f) => f.whole === d))).toBe(true);
        await rm(run, { recursive: true });
      }),
      { numRuns: 25 },
    );
  });
});

describe.skipIf(refused !== undefined)("EROFS mounts (root)", () => {
  it("a mounted file reads back as the concatenation of its pieces, its bdi's read-ahead raised", async () => {
    const dir = await tempDir();
    const { devBytes, files, planned: planFiles } = await randomFiles(dir);

    await fc.assert(
      fc.asyncProperty(files, async (drawn) => {
        const run = await mkdtemp(join(dir, "run-"));
        const planned = await withWhole(run, await planFiles(drawn), devBytes);
        const bdis = await readdir("/sys/class/bdi");
        const { mount } = await mountImage(planned, run);
        try {
          // the mount's own bdi: it appeared with the mount, and goes with it
          expect(bdis).not.toContain(mount.bdi);
          for (const f of planned) expect((await readFile(join(mount.dir, f.name))).equals(expected(f.plan, devBytes)), f.name).toBe(true);
          expect(mount.bdi).toMatch(/^erofs-\d+$/);
          expect((await readFile(`/sys/class/bdi/${mount.bdi}/read_ahead_kb`, "utf8")).trim()).toBe(String(EROFS_READ_AHEAD_KB));
        } finally {
          expect(await mount.close()).toBe("unmounted");
        }
        expect(await mounted(join(run, "mnt"))).toBe(false);
        expect(await readdir("/sys/class/bdi")).not.toContain(mount.bdi);
        expect(await readdir(join(run, "mnt"))).toEqual([]);
        await rm(run, { recursive: true });
      }),
      { numRuns: 12 },
    );
  });

  it("folders of several blocks list and look up every name (sorted by bytes, names before \".\" too)", async () => {
    const dir = await tempDir();
    const names = Array.from({ length: 600 }, (_, i) => `${["-", "+", "a", "Z", "é"][i % 5]}model-${String(i).padStart(4, "0")}.gguf`);
    // file i: a block of one device (600 whole files would not fit in the mount's options), never its whole file
    const dev = join(dir, "dev");
    await writeFile(dev, Buffer.concat(names.map((_, i) => Buffer.concat([Buffer.from(`file ${i}`), Buffer.alloc(EROFS_BLOCK - Buffer.byteLength(`file ${i}`))]))));
    const whole = join(dir, "unused");
    const files = await Promise.all(names.map(async (n, i) => ({ name: `many/${n}`, whole, plan: await planOf([dev], new Uint8Array(), [{ kind: "source", at: 0, source: 0, offset: i * EROFS_BLOCK, length: Buffer.byteLength(`file ${i}`) }]) })));
    const { mount } = await mountImage([...files, { name: "top", whole, plan: files[0]!.plan }], dir);
    expect((await readdir(mount.dir)).sort()).toEqual(["many", "top"]);
    expect((await readdir(join(mount.dir, "many"))).sort()).toEqual([...names].sort());
    for (const [i, n] of names.entries()) expect(await readFile(join(mount.dir, "many", n), "utf8")).toBe(`file ${i}`);
    expect(await mount.close()).toBe("unmounted");
  });

  it("a mount still in use is detached, and goes when its last file is closed", async () => {
    const dir = await tempDir();
    const dev = join(dir, "dev");
    await writeFile(dev, randomBytes(EROFS_CHUNK));
    const { mount } = await mountImage([{ name: "f", whole: join(dir, "unused"), plan: await planOf([dev], new Uint8Array(), [{ kind: "source", at: 0, source: 0, offset: 0, length: EROFS_CHUNK }]) }], dir);
    const held = await open(join(mount.dir, "f"), "r");
    try {
      expect(await mount.close()).toBe("detached");
      expect(await mounted(mount.dir)).toBe(false);
      // the open file still reads: the kernel keeps the detached mount until it is closed
      const { bytesRead } = await held.read(Buffer.alloc(16), 0, 16, 0);
      expect(bytesRead).toBe(16);
    } finally {
      await held.close();
    }
  });

  it("real llama-server loads a translated gemma3 whose chunks point into the untouched blob and the FUSE daemon's file of it; EROFS goes before FUSE", async () => {
    const dir = await tempDir();
    const blob = await writeWideFixture(dir);
    const { text, mmproj } = await viewsOf(blob);
    await mmproj?.close();
    const fuse = await FuseMount.mount(join(dir, "fuse"), { sidecars: join(dir, "sidecars") });
    try {
      const { plan, computed } = await planView(text!, { sidecarPath: (t, i) => fuse.sidecars.pathFor("wide", t, i) });
      // the daemon's own file of the translation, padded to a whole block, under a name it does not list
      await fuse.addFile(".erofs/wide", wholeFilePlan(plan), computed);
      const whole = join(fuse.dir, ".erofs/wide");
      expect(await readdir(fuse.dir)).toEqual([]);
      expect((await stat(whole)).size % EROFS_BLOCK).toBe(0);
      const blobHash = await fileDigest(blob);
      const { mount, ranges, whole: fromWhole } = await mountImage([{ name: "m/m.gguf", plan, whole }], dir);
      // metadata only: the chunks that are not ranges of the blob are not in the image
      expect((await stat(join(dir, "image.erofs"))).size).toBe(3 * EROFS_BLOCK); // superblock, inodes and chunk indexes; the root and m/
      const model = join(mount.dir, "m/m.gguf");
      // the mounted file is the translation, byte for byte
      const copy = join(dir, "copy.gguf");
      await text!.writeTo(copy);
      expect(await fileDigest(model)).toBe(await fileDigest(copy));
      expect(ranges + fromWhole).toBe(Math.ceil(plan.size / EROFS_CHUNK));
      // the feed-forward tensors are 24 MiB of the 24.1: all but the chunks at their seams point into the blob
      expect(ranges).toBeGreaterThanOrEqual(6);
      expect(fromWhole).toBeGreaterThanOrEqual(1);

      // llama-server loads the model through the mount (startLlamaServer fails with its log if not)
      const server = await startLlamaServer({ model });
      await server.stop();
      expect(await mount.close()).toBe("unmounted");
      expect(await mounted(mount.dir)).toBe(false);
      expect(await fileDigest(blob)).toBe(blobHash);
    } finally {
      await fuse.close();
      await text!.close();
    }
    expect(await mounted(fuse.dir)).toBe(false);
  });
});
