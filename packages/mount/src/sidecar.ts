import { createHash, randomBytes } from "node:crypto";
import type { BigIntStats } from "node:fs";
import { mkdir, open, readdir, readFile, rename, rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { processAlive, writeFileAtomic } from "@compat/files";
import type { GgufTensor } from "@compat/gguf";
import { MountError } from "./errors";
import type { ComputedPart } from "./plan";

/**
 * What follows a sidecar's bytes in its file: their sha256, so that what was written can be
 * told from what is there now. The daemon reads only the bytes before it (native/mountd.c
 * knows this length too).
 */
export const SIDECAR_DIGEST_BYTES = 32;

/** Beside a sidecar `NAME.bin`, `NAME.bin.hashed` names the version of it last found whole. */
const HASHED = ".hashed";

/** Why a sidecar on disk cannot be used: it is not there, or it is not what was written. */
export type SidecarCheck = { ok: true } | { ok: false; missing: true } | { ok: false; missing: false; why: string };

/**
 * Files of computed tensor bytes, each named by a hash of what its bytes are made from (the
 * caller's key for the file: source digest, translator version, profile, view) and of the
 * tensor (index, name, type, shape, op), so an entry is written once and stays valid for every
 * mount of the same translation. A name says what the bytes should be, not what they are: each
 * file ends with the sha256 of its bytes, and `verify` holds them to it before they are used,
 * once per version of the file (device, inode, size, mtime, ctime), as blobs are: the version
 * found whole is kept beside it (`NAME.bin.hashed`), so a later check, in this process or
 * another, is two `stat`s and a small read. A version is kept there only once its bytes are on
 * the disk (fsynced): one that a crash may have torn has no `.hashed` file, and is hashed.
 */
export class SidecarStore {
  /** Sidecars written and not yet fsynced, with their `.hashed` files still to put in place (`settled`), by path. */
  private readonly syncingOf = new Map<string, Promise<void>>();
  /** The version of each sidecar this store wrote whose `.hashed` file is not in place yet, by path. */
  private readonly unsynced = new Map<string, string>();

  constructor(readonly dir: string) {}

  /** Resolves once every sidecar written so far is on the disk and its version kept. */
  async settled(): Promise<void> {
    while (this.syncingOf.size > 0) await Promise.all(this.syncingOf.values());
  }

  /** The sidecar of tensor `index` of the file whose content key is `fileKey`. */
  pathFor(fileKey: string, tensor: GgufTensor, index: number): string {
    const label = tensor.data.kind === "computed" ? tensor.data.label : tensor.data.kind;
    // v2: the bytes are followed by their sha256 (v1 files, without it, are not looked at)
    const id = JSON.stringify({ v: 2, file: fileKey, index, name: tensor.name, type: tensor.type, shape: tensor.shape, op: label });
    const hex = createHash("sha256").update(id).digest("hex");
    return join(this.dir, hex.slice(0, 2), `${hex.slice(2, 40)}.bin`);
  }

  /** Removes the temp files of writers that died before their rename (`<name>.<pid>.<random>.tmp`). */
  async sweep(): Promise<void> {
    for (const sub of await readdir(this.dir).catch(() => [] as string[])) {
      for (const name of await readdir(join(this.dir, sub)).catch(() => [] as string[])) {
        const m = /\.(\d+)\.[0-9a-f]+\.tmp$/.exec(name); // a sidecar's or a `.hashed` file's
        if (m && !processAlive(Number(m[1]))) await rm(join(this.dir, sub, name), { force: true });
      }
    }
  }

  /**
   * Whether the sidecar at `path` holds `length` bytes whose sha256 is the one written after
   * them. Each version of the file (device, inode, size, mtime, ctime: a write moves the ctime,
   * which nothing sets back) is hashed once and then known by its `.hashed` file. One that is
   * not whole is removed, and the answer says why.
   */
  async verify(path: string, length: number): Promise<SidecarCheck> {
    let fh;
    try {
      // a version already found whole, or written here and not changed since (its bytes are in
      // the page cache until they are on the disk); the daemon opens the path after this, either way
      const st = await stat(path, { bigint: true });
      if (this.unsynced.get(path) === versionOf(st) || (await this.known(path, st))) return { ok: true };
      fh = await open(path, "r");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return { ok: false, missing: true };
      throw e;
    }
    let why: string | undefined;
    try {
      const st = await fh.stat({ bigint: true });
      const version = versionOf(st);
      if (Number(st.size) !== length + SIDECAR_DIGEST_BYTES) why = `${st.size} bytes where ${length} and their sha256 were written`;
      else {
        const hash = createHash("sha256");
        const buf = Buffer.allocUnsafe(Math.min(length, 1 << 20) || 1);
        for (let at = 0; at < length; ) {
          const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, length - at), at);
          if (bytesRead === 0) break;
          hash.update(buf.subarray(0, bytesRead));
          at += bytesRead;
        }
        const recorded = Buffer.alloc(SIDECAR_DIGEST_BYTES);
        await fh.read(recorded, 0, SIDECAR_DIGEST_BYTES, length);
        if (hash.digest().equals(recorded)) {
          // the version as it is now (one changed while it was hashed is hashed again next time),
          // kept once its bytes are on the disk: another writer's may not be fsynced yet
          if (versionOf(await fh.stat({ bigint: true })) === version) {
            await fh.datasync();
            await remember(path, version);
          }
          return { ok: true };
        }
        why = "its bytes do not match the sha256 written with them";
      }
    } finally {
      await fh.close();
    }
    // after this store's own fsync of it, if one is under way: its `.hashed` file goes too
    await this.syncingOf.get(path);
    await rm(path, { force: true });
    await rm(path + HASHED, { force: true });
    return { ok: false, missing: false, why };
  }

  /**
   * Whether this version of the sidecar (`st`) was found whole: its `.hashed` file names it and
   * was written after the sidecar last changed. File times tick coarsely (a few ms), so a write
   * in the same tick as the `.hashed` file would keep every field of the version it names: such
   * a sidecar is hashed again (git's "racily clean" files), and its `.hashed` file rewritten.
   */
  private async known(path: string, st: BigIntStats): Promise<boolean> {
    const memo = await stat(path + HASHED, { bigint: true }).catch(() => undefined);
    if (memo === undefined || st.ctimeNs >= memo.mtimeNs) return false;
    return (await readFile(path + HASHED, "utf8").catch(() => "")) === versionOf(st);
  }

  /**
   * Computes and writes one sidecar, its bytes then their sha256: a temp file beside it, renamed
   * into place, so the file is whole or absent, never part of one, and readable as soon as this
   * resolves. Its fsync comes after, off the wait of the read that asked for it (an fsync can
   * take long on a busy disk): a crash before it can leave a torn file, and such a file has no
   * `.hashed` file yet, so its next check hashes it, finds it torn, and it is written again. The
   * `.hashed` file is put in place once the bytes are on the disk (`settled` waits for that).
   * Concurrent writers of the same sidecar write the same bytes; the last rename wins.
   */
  async write(part: ComputedPart): Promise<void> {
    const bytes = await part.produce();
    if (bytes.length !== part.length) throw new MountError("BAD_SIDECAR", `${part.label}: produced ${bytes.length} bytes, expected ${part.length}`, { path: part.path });
    const digest = createHash("sha256").update(bytes).digest();
    await mkdir(dirname(part.path), { recursive: true });
    const tmp = `${part.path}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
    const fh = await open(tmp, "wx", 0o644);
    try {
      let at = 0;
      for (const b of [bytes, digest]) {
        for (let done = 0; done < b.length; ) {
          const { bytesWritten } = await fh.write(b, done, b.length - done, at);
          done += bytesWritten;
          at += bytesWritten;
        }
      }
      await rename(tmp, part.path);
    } catch (e) {
      await rm(tmp, { force: true });
      await fh.close().catch(() => undefined);
      throw e;
    }
    // The version just written (after the rename, which moves the ctime): this store vouches for
    // it until its `.hashed` file is in place, which names it (a change since, however soon,
    // moves the ctime: the kernel gives a file whose times were just read a finer one).
    const version = await fh.stat({ bigint: true }).then(
      (st) => versionOf(st),
      () => undefined,
    );
    if (version !== undefined) this.unsynced.set(part.path, version);
    const synced = (async () => {
      try {
        if (version === undefined) return;
        await fh.sync();
        // not for a sidecar that replaced this one meanwhile (checked and removed, written again)
        const [now, ours] = await Promise.all([stat(part.path, { bigint: true }), fh.stat({ bigint: true })]);
        if (now.ino !== ours.ino || now.dev !== ours.dev) return;
        await remember(part.path, version);
      } catch {
        // not kept: the next check hashes the bytes (and fsyncs them) instead
      } finally {
        if (this.unsynced.get(part.path) === version) this.unsynced.delete(part.path);
        await fh.close().catch(() => undefined);
      }
    })();
    this.syncingOf.set(part.path, synced);
    void synced.then(() => {
      if (this.syncingOf.get(part.path) === synced) this.syncingOf.delete(part.path);
    });
  }
}

/** Keeps the version of `path` found whole; one that cannot be kept (no space) is only hashed again. */
async function remember(path: string, version: string): Promise<void> {
  await writeFileAtomic(path + HASHED, version).catch(() => undefined);
}

function versionOf(st: { dev: bigint; ino: bigint; size: bigint; mtimeNs: bigint; ctimeNs: bigint }): string {
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
}
