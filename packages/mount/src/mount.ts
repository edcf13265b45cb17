import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, readdirSync, realpathSync, statSync } from "node:fs";
import { stat, writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { fuseSupport } from "./daemon";
import { MountError } from "./errors";
import { detachMount, mountAt, mountState } from "./mounts";
import type { ComputedPart, FilePlan } from "./plan";
import { addFileMessage, addLinkMessage, filledMessage, MessageReader, removeMessage, Reply, stopMessage, type DaemonMessage } from "./protocol";
import { SidecarStore } from "./sidecar";

export interface MountOptions {
  /** Let other users read the files (FUSE's allow_other; for users other than root, /etc/fuse.conf must have user_allow_other). */
  allowOther?: boolean;
  /** Worker threads of the daemon's read path (default 8). */
  threads?: number;
  /** Where computed tensors are kept: a SidecarStore, or its folder. */
  sidecars: SidecarStore | string;
  env?: Record<string, string | undefined>;
  /** Lines the daemon prints (warnings about sources that changed, …). */
  onLog?(line: string): void;
  /** How long to wait for the daemon to mount (default 15 s). */
  startTimeoutMs?: number;
}

export interface MountExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The daemon's last lines on stderr. */
  lastLines: string[];
}

const ERRNO_NAMES: Record<number, string> = { 2: "ENOENT", 5: "EIO", 22: "EINVAL", 116: "ESTALE" };

/**
 * A read-only FUSE mount whose files are plans (header bytes, ranges of source files,
 * sidecars of computed bytes), served by the native daemon (native/mountd.c) on its own
 * threads. This object is the daemon's controller: it adds and removes files, writes a
 * sidecar the first time the daemon needs it, and checks one already on disk against its
 * sha256 before the daemon reads it. The daemon unmounts when the controller goes away,
 * however it goes.
 */
/** `dir` resolved (links followed), or as given when it cannot be. */
function realpathOr(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    return resolve(dir);
  }
}

export class FuseMount {
  /** The mount point (absolute, resolved). */
  readonly dir: string;
  /** Resolves when the daemon has exited and the mount is gone. */
  readonly exited: Promise<MountExit>;
  private readonly child: ChildProcess;
  /** Where computed tensors are written on first read. */
  readonly sidecars: SidecarStore;
  /**
   * The sidecars the files read, by path: their length, how to compute them where that is known,
   * and how many files read them (two names of one model share theirs).
   */
  private readonly needed = new Map<string, { length: number; part?: ComputedPart; files: number }>();
  /** Sidecar paths by the file that reads them, to forget them with the file. */
  private readonly neededBy = new Map<string, string[]>();
  private readonly onLog: ((line: string) => void) | undefined;
  private readonly waiting = new Map<number, { resolve(): void; reject(e: Error): void; what: string }>();
  private nextId = 1;
  private fills: Promise<void> = Promise.resolve();
  private lines: string[] = [];
  private gone: MountExit | undefined;
  private stopping = false;

  private constructor(dir: string, child: ChildProcess, sidecars: SidecarStore, onLog: ((line: string) => void) | undefined, ready: (m: DaemonMessage | Error) => void) {
    this.dir = dir;
    this.child = child;
    this.sidecars = sidecars;
    this.onLog = onLog;
    const reader = new MessageReader();
    child.stdout!.on("data", (chunk: Buffer) => {
      for (const m of reader.push(chunk)) {
        if (m.type === Reply.READY) ready(m);
        else if (m.type === Reply.ACK) this.acked(m);
        else if (m.type === Reply.FILL) this.fill(m.id, m.text);
      }
    });
    let partial = "";
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      const parts = (partial + chunk).split("\n");
      partial = parts.pop()!;
      for (const line of parts) {
        this.lines.push(line);
        if (this.lines.length > 20) this.lines.shift();
        onLog?.(line);
      }
    });
    child.stdin!.on("error", () => undefined); // the daemon died: reported through `exited`
    this.exited = new Promise((done) => {
      child.once("error", (e) => ready(e));
      child.once("close", (code, signal) => {
        this.gone = { code, signal, lastLines: [...this.lines, ...(partial ? [partial] : [])] };
        const why = new MountError("DAEMON_EXITED", `${this.dir}: the mount daemon exited (${signal ?? code})${this.lines.length ? `: ${this.lines[this.lines.length - 1]}` : ""}`, { ...this.gone });
        for (const w of this.waiting.values()) w.reject(why);
        this.waiting.clear();
        ready(why);
        done(this.gone);
      });
    });
  }

  /**
   * Mounts an empty read-only tree at `dir` (created if missing; it must be empty). A stale
   * mount left there by a daemon that was killed is detached first; a live one is refused.
   */
  static async mount(dir: string, opts: MountOptions): Promise<FuseMount> {
    const env = opts.env ?? process.env;
    const support = fuseSupport(env);
    if (!support.usable) throw new MountError("FUSE_UNAVAILABLE", support.reason);
    // The folder's checks are synchronous: metadata of a folder that no FUSE mount serves (a
    // mount there is looked at first), each a few microseconds, where a trip through libuv's
    // threads costs a start whose main thread is busy (serve --all) about a millisecond each.
    try {
      mkdirSync(dir, { recursive: true });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "EEXIST" && code !== "ENOTCONN") throw new MountError("BAD_MOUNTPOINT", `${dir}: ${(e as Error).message}`, { dir });
    }
    const point = realpathOr(dir);
    const state = await mountState(point);
    if (state === "live") throw new MountError("ALREADY_MOUNTED", `${point}: already an ollama-compat mount (stop it, or unmount it: fusermount3 -u ${point})`, { dir: point });
    if (state === "other") throw new MountError("BAD_MOUNTPOINT", `${point}: another file system is mounted there`, { dir: point });
    if (state === "stale") {
      opts.onLog?.(`${point}: a mount whose daemon is gone (killed?): detaching it`);
      await detachMount(point).catch((e: Error) => {
        if (mountAt(point) !== undefined) throw new MountError("BAD_MOUNTPOINT", `${point}: a stale mount that cannot be detached: ${e.message}`, { dir: point });
      });
    }
    let entries: string[];
    try {
      if (!statSync(point).isDirectory()) throw new MountError("BAD_MOUNTPOINT", `${point}: not a folder`, { dir: point });
      entries = readdirSync(point);
    } catch (e) {
      throw e instanceof MountError ? e : new MountError("BAD_MOUNTPOINT", `${point}: ${(e as Error).message}`, { dir: point });
    }
    if (entries.length > 0) throw new MountError("BAD_MOUNTPOINT", `${point}: not empty (a mount would hide what is there)`, { dir: point });

    const args = [point, "--threads", String(opts.threads ?? 8), ...(opts.allowOther ? ["--allow-other"] : [])];
    // Its own process group: a terminal's ^C goes to the controller, which stops it in order.
    const child = spawn(support.daemon, args, { stdio: ["pipe", "pipe", "pipe"], detached: true, env: { ...process.env, ...env } });
    const sidecars = typeof opts.sidecars === "string" ? new SidecarStore(opts.sidecars) : opts.sidecars;
    let ready!: (m: DaemonMessage | Error) => void;
    const readyP = new Promise<DaemonMessage | Error>((r) => (ready = r));
    // the child's listeners before any await: a daemon that exits at once (its "close" emitted
    // during the sweep) would otherwise never be seen, and the start would wait for it forever
    const mount = new FuseMount(point, child, sidecars, opts.onLog, ready);
    try {
      await sidecars.sweep();
    } catch (e) {
      child.kill("SIGKILL");
      await mount.exited;
      throw e;
    }
    const timeoutMs = opts.startTimeoutMs ?? 15_000;
    let timer: NodeJS.Timeout | undefined;
    const first = await Promise.race([readyP, new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), timeoutMs)))]);
    clearTimeout(timer);
    if (first === "timeout") {
      child.kill("SIGKILL");
      await mount.exited;
      throw new MountError("MOUNT_FAILED", `${point}: the mount daemon did not mount within ${timeoutMs} ms`, { dir: point });
    }
    if (first instanceof Error) {
      const last = mount.gone?.lastLines.filter((l) => l.trim() !== "").pop();
      throw new MountError("MOUNT_FAILED", `${point}: cannot mount: ${last ?? first.message}`, { dir: point, lastLines: mount.gone?.lastLines });
    }
    await widenReadahead(point);
    return mount;
  }

  /** The daemon's pid. */
  get pid(): number {
    return this.child.pid!;
  }

  /** Whether the daemon still serves the mount. */
  get alive(): boolean {
    return this.gone === undefined;
  }

  /**
   * Adds (or replaces) the file at `path` (relative to the mount point, `/`-separated; folders
   * are made as needed). `computed` says how to write the plan's sidecars on first read; a
   * sidecar already on disk is checked against its sha256 before the daemon reads it.
   */
  async addFile(path: string, plan: FilePlan, computed: readonly ComputedPart[] = []): Promise<void> {
    this.forget(path);
    const parts = new Map(computed.map((c) => [c.path, c]));
    for (const s of plan.sidecars) {
      const known = this.needed.get(s.path);
      this.needed.set(s.path, { length: s.length, part: parts.get(s.path) ?? known?.part, files: (known?.files ?? 0) + 1 });
    }
    this.neededBy.set(path, plan.sidecars.map((s) => s.path));
    await this.request((id) => addFileMessage(id, path, plan), path);
  }

  /** Adds (or replaces) a symbolic link at `path` to `target` (a native model file, as it is). */
  async addLink(path: string, target: string, mtimeNs = 0n): Promise<void> {
    await this.request((id) => addLinkMessage(id, path, target, mtimeNs), path);
  }

  /** Removes the file, link or folder at `path`, and folders left empty above it. */
  async remove(path: string): Promise<void> {
    this.forget(path);
    await this.request((id) => removeMessage(id, path), path);
  }

  /** Drops what the files at or under `path` needed for their sidecars. */
  private forget(path: string): void {
    for (const [file, parts] of this.neededBy) {
      if (file !== path && !file.startsWith(path + "/")) continue;
      for (const p of parts) {
        const n = this.needed.get(p);
        if (n !== undefined && --n.files <= 0) this.needed.delete(p);
      }
      this.neededBy.delete(file);
    }
  }

  /** Unmounts: the daemon stops serving, unmounts and exits. Files still open get errors from then on. */
  async close(): Promise<MountExit> {
    if (!this.stopping && this.alive) {
      this.stopping = true;
      this.child.stdin!.end(stopMessage());
      const timer = setTimeout(() => this.child.kill("SIGTERM"), 5000);
      await this.exited;
      clearTimeout(timer);
    }
    const exit = await this.exited;
    // a daemon killed before it unmounted leaves the mount stale: detach it
    if ((await mountState(this.dir).catch(() => "none")) === "stale") await detachMount(this.dir).catch(() => undefined);
    await this.sidecars.settled(); // the sidecars written are on the disk, and known whole to the next mount
    return exit;
  }

  private request(message: (id: number) => Buffer, what: string): Promise<void> {
    if (this.gone) return Promise.reject(new MountError("DAEMON_EXITED", `${this.dir}: the mount daemon has exited`, { ...this.gone }));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, what });
      this.child.stdin!.write(message(id));
    });
  }

  private acked(m: DaemonMessage): void {
    const w = this.waiting.get(m.id);
    if (!w) return;
    this.waiting.delete(m.id);
    if (m.code === 0) w.resolve();
    else w.reject(new MountError(m.code === 116 ? "REJECTED" : "BAD_PLAN", `${w.what}: the mount daemon refused it (${ERRNO_NAMES[m.code] ?? `errno ${m.code}`}): ${m.text}`, { path: w.what }));
  }

  /**
   * Vouches for a sidecar the daemon is about to open (it asks before every first read of one
   * after a file is opened): one on disk is checked against the sha256 written with it, and one
   * that is missing or not whole (removed, with a line naming it) is computed and written. One
   * at a time: at most one op output in memory.
   */
  private fill(id: number, path: string): void {
    const want = this.needed.get(path);
    this.fills = this.fills.then(async () => {
      let errno = 0;
      if (want === undefined) errno = 2;
      else {
        const part = want.part;
        try {
          const check = await this.sidecars.verify(path, want.length);
          if (!check.ok && !check.missing) this.onLog?.(`sidecar ${path}${part ? ` (${part.label})` : ""}: ${check.why}: removed${part ? ", computing it again" : ""}`);
          if (!check.ok) {
            if (part === undefined) errno = 2;
            else await this.sidecars.write(part);
          }
        } catch (e) {
          errno = 5;
          this.onLog?.(`sidecar ${path}${part ? ` (${part.label})` : ""}: cannot check or compute it: ${(e as Error).message}`);
        }
      }
      if (this.alive) this.child.stdin!.write(filledMessage(id, errno));
    });
  }
}

/** Readahead of the mount, in KiB: FUSE starts at 128, which leaves a cold read waiting on the disk. */
const READAHEAD_KIB = 4096;

/**
 * Raises the mount's readahead (its bdi's read_ahead_kb) so that a cold sequential read keeps
 * the source's disk busy: with FUSE's 128 KiB, a cold read through the mount took about twice
 * as long as reading the blob. Only root may write it; for other users it stays as it is.
 */
async function widenReadahead(point: string): Promise<void> {
  const dev = (await stat(point)).dev;
  const major = (dev >> 8) & 0xfff;
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  await writeFile(`/sys/class/bdi/${major}:${minor}/read_ahead_kb`, String(READAHEAD_KIB)).catch(() => undefined);
}
