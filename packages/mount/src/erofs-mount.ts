import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, stat, writeFile } from "node:fs/promises";
import { join, resolve, sep } from "node:path";
import { processAlive } from "@compat/files";
import { daemonPath } from "./daemon";
import { writeErofsImage } from "./erofs";
import { MountError } from "./errors";
import { mountTable } from "./mounts";

/**
 * read_ahead_kb for the mount's bdi: 8192, the value of this machine's disk (the probe's); with
 * the default 128 the page cache takes 128 KiB folios and a cold start is 1.4x slower.
 */
export const EROFS_READ_AHEAD_KB = 8192;

/**
 * Whether an EROFS mount can be tried here, and if not, the one-line reason. Only the attempt
 * tells whether the kernel has file-backed EROFS with `directio`: mountErofs says so.
 */
export type ErofsSupport = { usable: true; daemon: string } | { usable: false; reason: string };

export function erofsSupport(env: Record<string, string | undefined> = process.env): ErofsSupport {
  if (process.platform !== "linux") return { usable: false, reason: `EROFS is a Linux file system (this is ${process.platform})` };
  if (process.getuid?.() !== 0) return { usable: false, reason: "an EROFS mount needs root (the kernel has no EROFS mount in a user namespace)" };
  const daemon = daemonPath(env);
  if (daemon === undefined) return { usable: false, reason: "no ollama-compat-mountd (it makes the mount call)" };
  try {
    accessSync(daemon, constants.X_OK);
  } catch {
    return { usable: false, reason: `${daemon} is not executable` };
  }
  return { usable: true, daemon };
}

function run(daemon: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(daemon, args, { encoding: "utf8" }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as NodeJS.ErrnoException).code === "number" ? ((err as unknown as { code: number }).code) : -1;
      resolve({ code, stdout, stderr: stderr || (err?.message ?? "") });
    });
  });
}

/** A mounted EROFS image: `dir` presents its files until `close()`. */
export interface ErofsMount {
  dir: string;
  /** The mount's backing_dev_info under /sys/class/bdi (its read_ahead_kb was raised). */
  bdi: string;
  /** Unmounts; while a process still maps a file of it, detaches it (gone when the last user is). Resolves "detached" then. */
  close(): Promise<"unmounted" | "detached">;
}

/**
 * Mounts the image `image` (writeErofsImage) read-only on the folder `dir` with `devices` (the
 * image's, in order) and raises its read-ahead. EROFS_UNAVAILABLE when it cannot (not root, the
 * kernel refuses it: the caller falls back to FUSE), EROFS_UNSUPPORTED for device paths the mount
 * options cannot carry.
 */
export async function mountErofs(image: string, dir: string, devices: readonly string[], opts: { readAheadKb?: number; env?: Record<string, string | undefined> } = {}): Promise<ErofsMount> {
  const support = erofsSupport(opts.env);
  if (!support.usable) throw new MountError("EROFS_UNAVAILABLE", support.reason, { image, dir });
  // absolute: the kernel opens each device= path when it mounts, and the mount table shows them
  const r = await run(support.daemon, ["--erofs", resolve(image), resolve(dir), String(opts.readAheadKb ?? EROFS_READ_AHEAD_KB), ...devices.map((d) => resolve(d))]);
  if (r.code !== 0) {
    const line = r.stderr.trim().split("\n").pop() ?? "";
    const code = line.startsWith("EROFS_UNSUPPORTED") ? "EROFS_UNSUPPORTED" : "EROFS_UNAVAILABLE";
    throw new MountError(code, `${dir}: ${line.replace(/^EROFS_\w+: /, "") || `the mount helper exited with ${r.code}`}`, { image, dir });
  }
  const bdi = /^bdi (\S+)$/m.exec(r.stdout)?.[1] ?? "";
  let closed: Promise<"unmounted" | "detached"> | undefined;
  return {
    dir,
    bdi,
    close: () =>
      (closed ??= run(support.daemon, ["--erofs-umount", dir]).then((u) => {
        if (u.code !== 0) {
          closed = undefined;
          throw new MountError("MOUNT_FAILED", `${dir}: ${u.stderr.trim() || `unmount exited with ${u.code}`}`, { dir });
        }
        return u.stdout.includes("detached") ? "detached" : "unmounted";
      })),
  };
}

/**
 * Whether EROFS mounts work here, found by making one in a temp folder under `dir`: an image of a
 * 4 KiB file that points into a device file beside it, mounted, read back and unmounted. Put
 * `dir` on the blobs' file system: `directio` reads them with O_DIRECT, which not every file
 * system takes. What erofsSupport cannot tell (a kernel without file-backed EROFS or without
 * `directio`, a container without CAP_SYS_ADMIN) is a reason here.
 */
export async function probeErofs(dir: string, env: Record<string, string | undefined> = process.env): Promise<ErofsSupport> {
  const support = erofsSupport(env);
  if (!support.usable) return support;
  const work = await mkdtemp(join(dir, ".erofs-probe-"));
  try {
    const device = join(work, "device");
    const bytes = randomBytes(4096);
    await writeFile(device, bytes);
    const st = await stat(device, { bigint: true });
    const plan = { size: bytes.length, mtimeNs: st.mtimeNs, memory: new Uint8Array(), sources: [{ path: device, dev: st.dev, ino: st.ino, size: bytes.length, mtimeNs: st.mtimeNs }], sidecars: [], extents: [{ kind: "source" as const, at: 0, source: 0, offset: 0, length: bytes.length }] };
    // one chunk, a range of the device: it is its own whole file too
    const image = await writeErofsImage(join(work, "image"), [{ name: "probe", plan, whole: device }]);
    await mkdir(join(work, "mnt"));
    let mount: ErofsMount;
    try {
      mount = await mountErofs(join(work, "image"), join(work, "mnt"), image.devices, { env });
    } catch (e) {
      return { usable: false, reason: e instanceof Error ? e.message : String(e) };
    }
    try {
      const read = await readFile(join(work, "mnt", "probe")).catch((e: Error) => e);
      if (!(read instanceof Buffer) || !read.equals(bytes)) return { usable: false, reason: `an EROFS mount here does not read back its device (${read instanceof Error ? read.message : "other bytes"})` };
    } finally {
      await mount.close();
    }
    return support;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * A folder of its own under `root` for this process's EROFS mounts, `<pid>-<random>`: what
 * sweepErofsMounts tells a killed process's mounts by (another live process's are left alone).
 */
export async function erofsMountFolder(root: string): Promise<string> {
  await mkdir(root, { recursive: true });
  const dir = join(await realpath(root), `${process.pid}-${randomBytes(4).toString("hex")}`);
  await mkdir(dir);
  return dir;
}

/**
 * Unmounts the EROFS mounts a process that is gone left under `root` (in its erofsMountFolder:
 * a killed process unmounts nothing, and its mounts hold their blobs open), detaching those
 * still in use, and removes its folders. Resolves with the mount points it took down.
 */
export async function sweepErofsMounts(root: string, env: Record<string, string | undefined> = process.env): Promise<string[]> {
  const base = await realpath(root).catch(() => undefined);
  if (base === undefined) return [];
  const ownerGone = (name: string) => {
    const m = /^(\d+)-[0-9a-f]+$/.exec(name);
    return m !== null && !processAlive(Number(m[1]));
  };
  const swept: string[] = [];
  const support = erofsSupport(env);
  // the latest mounts first: one stacked on another comes off before it
  for (const m of mountTable().reverse()) {
    if (m.fsType !== "erofs" || !m.point.startsWith(base + sep)) continue;
    const owner = m.point.slice(base.length + 1).split(sep)[0]!;
    if (!ownerGone(owner)) continue;
    if (!support.usable) throw new MountError("EROFS_UNAVAILABLE", `${m.point}: a mount a gone process left, which only root can unmount: ${support.reason}`, { dir: m.point });
    const u = await run(support.daemon, ["--erofs-umount", m.point]);
    if (u.code !== 0) throw new MountError("MOUNT_FAILED", `${m.point}: ${u.stderr.trim() || `unmount exited with ${u.code}`}`, { dir: m.point });
    swept.push(m.point);
  }
  for (const name of await readdir(base).catch(() => [] as string[])) {
    if (ownerGone(name)) await rm(join(base, name), { recursive: true, force: true });
  }
  return swept;
}
