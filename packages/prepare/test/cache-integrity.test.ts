// The cache never serves a translation of other bytes than its source holds now (issue 27,
// items 2, 7 and 11): entries are keyed by the digest of the source's bytes, hashed once per
// version of the file; locks name their owner by more than a pid; a cache that cannot be
// written says why in words.
import { execFileSync, spawn } from "node:child_process";
import { cp, mkdir, open, readdir, readFile, rm, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { PrepareError, prepareModel, TranslationCache } from "@compat/prepare";
import { buildOllamaStore, MediaType, ModelStore } from "@compat/store";
import { tempDirs } from "./helpers";

const temp = tempDirs();
const noClip = { clipView: null } as const;

async function errorOf(p: Promise<unknown>): Promise<PrepareError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(PrepareError);
  return e as PrepareError;
}

/** An Ollama-layout gemma3 model (it needs translating) in a store of its own, as `gemma3:1b`. */
async function gemmaStore(seed: number): Promise<{ store: ModelStore; blob: string }> {
  const root = await temp();
  const fx = await generateFixtureFiles("gemma3", { seed, layout: "ollama", variant: "1b" }, await temp());
  const [built] = await buildOllamaStore(root, [{ name: "gemma3:1b", model: fx.text }]);
  return { store: new ModelStore(root), blob: built!.blob(MediaType.model) };
}

/** Flips one byte near the end (tensor data, not the header): same size, same name, other bytes. */
async function flipByte(path: string, keepMtime = false): Promise<() => Promise<void>> {
  const st = await stat(path);
  const at = st.size - 7;
  const fh = await open(path, "r+");
  const b = Buffer.alloc(1);
  await fh.read(b, 0, 1, at);
  const original = b[0]!;
  await fh.write(Buffer.from([original ^ 0x5a]), 0, 1, at);
  await fh.close();
  if (keepMtime) await utimes(path, st.atime, st.mtime); // what `touch -r` can hide; the change time still moves
  return async () => {
    const f = await open(path, "r+");
    await f.write(Buffer.from([original]), 0, 1, at);
    await f.close();
  };
}

describe("the cache serves only translations of the bytes its source holds now", () => {
  it("a bit-flipped blob is refused (DIGEST_MISMATCH, nothing cached); repaired, it gets the clean translation", async () => {
    const { store, blob } = await gemmaStore(21);
    const clean = await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir: await temp() }), ...noClip });
    const cleanBytes = await readFile(clean.modelPath);

    const dir = await temp();
    const repair = await flipByte(blob);
    const e = await errorOf(prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir }), ...noClip }));
    expect(e.code).toBe("DIGEST_MISMATCH");
    expect(e.message).toContain(blob);
    expect(await readdir(join(dir, "entries")).catch(() => [])).toEqual([]);

    await repair();
    const after = await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir }), ...noClip });
    expect(after.cacheHit).toBe(false);
    expect((await readFile(after.modelPath)).equals(cleanBytes)).toBe(true);
  });

  it("a blob changed after its translation was cached (mtime put back, as touch -r does) is hashed again and refused", async () => {
    const { store, blob } = await gemmaStore(22);
    const cache = new TranslationCache({ dir: await temp() });
    const first = await prepareModel(await store.resolve("gemma3:1b"), { cache, ...noClip });
    expect(first.cacheHit).toBe(false);
    // let the blob's version settle past the timestamp granularity, so that it is remembered
    await new Promise((r) => setTimeout(r, 150));
    expect((await prepareModel(await store.resolve("gemma3:1b"), { cache, ...noClip })).cacheHit).toBe(true);
    await flipByte(blob, true);
    const e = await errorOf(prepareModel(await store.resolve("gemma3:1b"), { cache, ...noClip }));
    expect(e.code).toBe("DIGEST_MISMATCH");
  });

  it("two stores with the same digest name and different bytes never share a translation", async () => {
    const a = await gemmaStore(23);
    // store B: a copy of store A whose blob holds another model's bytes (same size) under A's name
    const rootB = await temp();
    await cp(a.store.root, rootB, { recursive: true });
    const other = await generateFixtureFiles("gemma3", { seed: 24, layout: "ollama", variant: "1b" }, await temp());
    const blobB = join(rootB, "blobs", a.blob.split("/").pop()!);
    await rm(blobB);
    await writeFile(blobB, await readFile(other.text));
    expect((await stat(blobB)).size).toBe((await stat(a.blob)).size);

    const dir = await temp();
    const fromA = await prepareModel(await a.store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir }), ...noClip });
    const e = await errorOf(prepareModel(await new ModelStore(rootB).resolve("gemma3:1b"), { cache: new TranslationCache({ dir }), ...noClip }));
    expect(e.code).toBe("DIGEST_MISMATCH");
    expect(e.message).toContain(blobB);
    // and the other way round: B first into an empty cache is refused, A still translates
    const dir2 = await temp();
    await errorOf(prepareModel(await new ModelStore(rootB).resolve("gemma3:1b"), { cache: new TranslationCache({ dir: dir2 }), ...noClip }));
    const a2 = await prepareModel(await a.store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir: dir2 }), ...noClip });
    expect((await readFile(a2.modelPath)).equals(await readFile(fromA.modelPath))).toBe(true);
  });

  it("a plain file rewritten in place gets a new translation, not the old one", async () => {
    const dir = await temp();
    const a = await generateFixtureFiles("gemma3", { seed: 25, layout: "ollama", variant: "1b" }, dir);
    const b = await generateFixtureFiles("gemma3", { seed: 26, layout: "ollama", variant: "1b" }, await temp());
    const cache = new TranslationCache({ dir: join(dir, "cache") });
    const first = await prepareModel(await new ModelStore(dir).resolve(a.text), { cache, ...noClip });
    await writeFile(a.text, await readFile(b.text)); // same path, same inode, other bytes
    const second = await prepareModel(await new ModelStore(dir).resolve(a.text), { cache, ...noClip });
    expect(second.cacheHit).toBe(false);
    expect(second.modelPath).not.toBe(first.modelPath);
    const fromB = await prepareModel(await new ModelStore(dir).resolve(b.text), { cache: new TranslationCache({ dir: await temp() }), ...noClip });
    expect((await readFile(second.modelPath)).equals(await readFile(fromB.modelPath))).toBe(true);
  });

  it("a source written to while it is translated: SOURCE_CHANGED, no entry", async () => {
    const { store, blob } = await gemmaStore(27);
    const dir = await temp();
    let touched = false;
    const e = await errorOf(
      prepareModel(await store.resolve("gemma3:1b"), {
        cache: new TranslationCache({ dir }),
        ...noClip,
        onProgress: () => {
          if (touched) return;
          touched = true;
          execFileSync("sh", ["-c", `printf 'x' | dd of='${blob}' bs=1 seek=100 conv=notrunc status=none`]);
        },
      }),
    );
    expect(e.code).toBe("SOURCE_CHANGED");
    expect(await readdir(join(dir, "entries")).catch(() => [])).toEqual([]);
    expect(await readdir(join(dir, "tmp")).catch(() => [])).toEqual([]);
  });

  it("a blob is hashed once per version: later launches take the remembered digest, found by one fstat", async () => {
    const { store, blob } = await gemmaStore(28);
    const dir = await temp();
    await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir }), ...noClip });
    // a version changed within the file system's timestamp granularity before the hash is not remembered
    await new Promise((r) => setTimeout(r, 150));
    expect((await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir }), ...noClip })).cacheHit).toBe(true);
    const memo = await readdir(join(dir, "digests"));
    expect(memo).toEqual([`${(await stat(blob)).dev}-${(await stat(blob)).ino}.json`]);
    // what is believed of this version is the memo, not a new hash: a memo that says other
    // bytes makes the next launch refuse the blob (and nothing else could have told it)
    const path = join(dir, "digests", memo[0]!);
    const m = JSON.parse(await readFile(path, "utf8")) as { digest: string };
    await writeFile(path, JSON.stringify({ ...m, digest: `sha256:${"0".repeat(64)}` }));
    expect((await errorOf(prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir }), ...noClip }))).code).toBe("DIGEST_MISMATCH");
    // a new version of the file (its change time moves) is hashed again
    await utimes(blob, new Date(), new Date());
    expect((await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir }), ...noClip })).cacheHit).toBe(true);
  });
});

describe("cache locks name their owner by more than a pid", () => {
  async function lockOf(store: ModelStore, dir: string): Promise<string> {
    const key = new TranslationCache({ dir }).keyFor((await store.resolve("gemma3:1b")).modelDigest!, "text");
    await mkdir(join(dir, "locks"), { recursive: true });
    return join(dir, "locks", `${key}.lock`);
  }

  it("a lock naming a live, unrelated process (PID 1, with another start time) is taken over at once", async () => {
    const { store } = await gemmaStore(31);
    const dir = await temp();
    const lock = await lockOf(store, dir);
    const boot = (await readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
    await writeFile(lock, JSON.stringify({ pid: 1, start: "1", boot, token: "stale" }));
    const waits: string[] = [];
    const r = await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir, lockTimeoutMs: 5_000 }), ...noClip, onStatus: (l) => waits.push(l) });
    expect(r.cacheHit).toBe(false);
    expect(waits.filter((l) => l.startsWith("waiting"))).toEqual([]);
  });

  it("a lock from an earlier boot, or naming this very process's pid with another start time, is stale", async () => {
    const { store } = await gemmaStore(32);
    const dir = await temp();
    const lock = await lockOf(store, dir);
    await writeFile(lock, JSON.stringify({ pid: process.pid, start: "1", token: "old" }));
    expect((await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir, lockTimeoutMs: 5_000 }), ...noClip })).cacheHit).toBe(false);
    const dir2 = await temp();
    await writeFile(await lockOf(store, dir2), JSON.stringify({ pid: process.pid, start: "1", boot: "not-this-boot", token: "old" }));
    expect((await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir: dir2, lockTimeoutMs: 5_000 }), ...noClip })).cacheHit).toBe(false);
  });

  it("a lock whose owner cannot be checked (a bare pid, as PID 1 in a container writes it): the wait is said, and ends when it is no longer refreshed", async () => {
    const { store } = await gemmaStore(33);
    const dir = await temp();
    const lock = await lockOf(store, dir);
    // taken before the lock is written: the lock is stale 2 s after its mtime, so a stall between
    // the write and a later clock reading (a loaded machine) would shorten the wait measured
    const started = Date.now();
    await writeFile(lock, "1 a1b2c3d4e5f6");
    const waits: string[] = [];
    const r = await prepareModel(await store.resolve("gemma3:1b"), {
      cache: new TranslationCache({ dir, lockTimeoutMs: 60_000, lockStaleMs: 2_000 }),
      ...noClip,
      onStatus: (l) => waits.push(l),
    });
    expect(r.cacheHit).toBe(false);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_500);
    const said = waits.filter((l) => l.startsWith("waiting"));
    expect(said).toHaveLength(1);
    expect(said[0]).toMatch(/pid 1 \(not one this machine can check: the lock is taken over if it is not refreshed within \d+ s\)/);
    expect(said[0]).toContain(lock);
    // an old one is stale at once
    const dir2 = await temp();
    const lock2 = await lockOf(store, dir2);
    await writeFile(lock2, "1 a1b2c3d4e5f6");
    const old = new Date(Date.now() - 10 * 60_000);
    await utimes(lock2, old, old);
    const waits2: string[] = [];
    await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir: dir2 }), ...noClip, onStatus: (l) => waits2.push(l) });
    expect(waits2.filter((l) => l.startsWith("waiting"))).toEqual([]);
  });

  it("a live owner is waited for, and the wait says who: the lock timeout names it too", async () => {
    const { store } = await gemmaStore(34);
    const dir = await temp();
    const lock = await lockOf(store, dir);
    // a real live process, identified as the cache identifies owners
    const holder = spawn(process.execPath, ["-e", "setTimeout(() => {}, 60000)"], { stdio: "ignore" });
    try {
      await new Promise((r) => setTimeout(r, 200));
      const stat = await readFile(`/proc/${holder.pid}/stat`, "utf8");
      const start = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
      await writeFile(lock, JSON.stringify({ pid: holder.pid, start, token: "live" }));
      const waits: string[] = [];
      const e = await errorOf(prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir, lockTimeoutMs: 1_500 }), ...noClip, onStatus: (l) => waits.push(l) }));
      expect(e.code).toBe("CACHE_LOCK_TIMEOUT");
      expect(e.message).toContain(`pid ${holder.pid} (running)`);
      expect(waits.find((l) => l.startsWith("waiting"))).toContain(`pid ${holder.pid} (running) is writing it`);
    } finally {
      holder.kill("SIGKILL");
    }
    // once it is gone, the lock is taken over at once
    await new Promise((r) => holder.once("close", r));
    expect((await prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir, lockTimeoutMs: 5_000 }), ...noClip })).cacheHit).toBe(false);
  });
});

describe("a cache that cannot be written says why", () => {
  it("below a file: the file is named, not ENOTDIR: mkdir", async () => {
    const { store } = await gemmaStore(35);
    const file = join(await temp(), "not-a-folder");
    await writeFile(file, "x");
    const e = await errorOf(prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir: join(file, "cache") }), ...noClip }));
    expect(e.code).toBe("CACHE_UNWRITABLE");
    expect(e.message).toContain(`${file} is a file, not a folder (ENOTDIR)`);
    expect(e.message).not.toMatch(/ENOTDIR: /);
  });

  it("on a read-only mount: EROFS, not ENOENT (mounted as root)", async (ctx) => {
    if (process.getuid?.() !== 0) ctx.skip();
    const { store } = await gemmaStore(36);
    const mnt = await temp();
    execFileSync("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", mnt]);
    try {
      const e = await errorOf(prepareModel(await store.resolve("gemma3:1b"), { cache: new TranslationCache({ dir: join(mnt, "cache", "translated") }), ...noClip }));
      expect(e.code).toBe("CACHE_UNWRITABLE");
      expect(e.message).toContain(`${mnt} is on a read-only file system (EROFS)`);
      expect(e.message).not.toMatch(/ENOENT/);
    } finally {
      execFileSync("umount", [mnt]);
    }
  });
});
