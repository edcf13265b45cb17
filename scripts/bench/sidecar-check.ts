// The sidecar check's rows of `npm run bench` (issue 35): what it costs to hold a mounted model's
// sidecars to the sha256 written after their bytes before they are served, against reading them once.
import { closeSync, openSync, readdirSync, readSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { SIDECAR_DIGEST_BYTES, SidecarStore } from "@compat/mount";
import { StoreMount } from "@compat/prepare";
import { buildOllamaStore } from "@compat/store";
import { catAsync, type MountBenchContext } from "./mount";

const MiB = 2 ** 20;

/** Reads a file to its end, 1 MiB at a time, the bytes dropped. */
function readOnce(path: string, buf: Buffer): void {
  const fd = openSync(path, "r");
  try {
    while (readSync(fd, buf, 0, buf.length, null) > 0);
  } finally {
    closeSync(fd);
  }
}

/**
 * 6. The sidecar check (issue 35): the bench's gemma3 vision blob mounted and its projector read
 * whole (its promoted tensors written as sidecars); then every sidecar checked as when that
 * version of it is first checked (read and hashed) and as at any later open (a `stat` and the
 * version kept beside it), by a new SidecarStore each time (as a new mount's), against reading
 * the same sidecars once, page cache warm.
 */
export async function sidecarCheck(ctx: MountBenchContext, work: string, blob: string): Promise<void> {
  const at = join(work, "check");
  const store = join(at, "store");
  await buildOllamaStore(store, [{ name: "gemma3:4b", model: blob }]);
  const dir = join(at, "sidecars");
  const mount = await StoreMount.open({ dir: join(at, "mnt"), sidecarDir: dir, store, rescanMs: 0 });
  try {
    await catAsync(mount.models()[0]!.prepared.mmproj!); // another process: this one answers the fills
  } finally {
    await mount.close();
  }
  const files = readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith(".bin")) // not their `.hashed` files
    .map((e) => join(e.parentPath, e.name))
    .map((path) => ({ path, length: statSync(path).size - SIDECAR_DIGEST_BYTES }));
  const bytes = files.reduce((n, f) => n + f.length, 0);
  const buf = Buffer.alloc(MiB);
  const read = () => {
    for (const f of files) readOnce(f.path, buf);
  };
  const check = async () => {
    const store = new SidecarStore(dir); // as a new mount's: nothing known in memory
    for (const f of files) if (!(await store.verify(f.path, f.length)).ok) throw new Error(`${f.path}: not whole`);
  };
  const first = async () => {
    for (const f of files) rmSync(`${f.path}.hashed`, { force: true }); // no version of it found whole yet
    await check();
  };
  // `first` leaves each version remembered: `later` finds it there
  const [tFirst, tRead, tLater] = await ctx.race([first, read, check]);
  const what = `${files.length} sidecar${files.length === 1 ? "" : "s"}, ${(bytes / MiB).toFixed(1)} MiB, of a mounted ${(ctx.blobMiB / 1024).toFixed(0)} GiB gemma3 vision model's projector`;
  ctx.row({
    scenario: `sidecar check, first of each version (read and hashed against its sha256; ${what}) vs reading them once`,
    ours: ctx.ms(tFirst!),
    baseline: ctx.ms(tRead!),
    ratio: tFirst! / tRead!,
    target: "reported: a read and a sha256 of each (at this Node's sha256 speed)",
    pass: undefined,
  });
  ctx.row({
    scenario: "  the check at any later open, in this mount or a new one (a stat and the version kept beside it) vs reading them once",
    ours: ctx.ms(tLater!),
    baseline: ctx.ms(tRead!),
    ratio: tLater! / tRead!,
    target: "< 1x (a stat, no read)",
    pass: tLater! < tRead!,
  });
  rmSync(at, { recursive: true, force: true });
}
