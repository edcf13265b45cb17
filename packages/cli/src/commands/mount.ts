import { spawn } from "node:child_process";
import { openSync, closeSync } from "node:fs";
import { readFile, rm, writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { processAlive } from "@compat/files";
import type { TranslationProfile } from "@compat/handlers";
import { StoreMount, type ModelsLayout } from "@compat/prepare";
import { CliError } from "../errors";
import { ExitCode, type CliIo } from "../io";
import { takeSignals } from "./serve";

export interface MountFlags {
  layout?: ModelsLayout;
  allowOther?: boolean;
  daemon?: boolean;
  pidFile?: string;
  log?: string;
  models?: string;
  cacheDir?: string;
  profile?: TranslationProfile;
}

/**
 * `mount DIR`: every installed model, translated where it needs it, as files under DIR that
 * take no disk (a read-only FUSE mount). Prints DIR on stdout once mounted; runs until
 * SIGINT/SIGTERM/SIGHUP, then unmounts. With --daemon it runs in the background: the pid
 * file names it, `kill` stops it.
 */
export async function mountCommand(dir: string, opts: MountFlags, io: CliIo): Promise<number> {
  if (dir.trim() === "") throw new CliError("usage", "mount: empty path; expected a folder to mount on");
  if (opts.daemon) return daemonize(dir, opts, io);
  if (opts.log !== undefined) throw new CliError("usage", "--log is for --daemon (in the foreground the log is stderr)");
  const status = (line: string) => io.err(`ollama-compat: ${line}\n`);
  // the signals are ours from the start: a store of thousands of models takes a while to mount,
  // and a signal meanwhile stops that and unmounts (as it does a rescan later)
  let caught: NodeJS.Signals | undefined;
  const ac = new AbortController();
  let stop!: () => void;
  const stopped = new Promise<void>((r) => (stop = r));
  const giveBack = takeSignals((sig) => {
    caught ??= sig;
    ac.abort();
    stop();
  });
  try {
    let mount: StoreMount;
    try {
      mount = await StoreMount.open({
        dir,
        ...(opts.models ? { store: opts.models } : {}),
        layout: opts.layout ?? "models-dir",
        ...(opts.profile ? { profile: opts.profile } : {}),
        ...(opts.cacheDir ? { sidecarDir: resolve(opts.cacheDir, "sidecars") } : {}),
        allowOther: opts.allowOther === true,
        env: io.env,
        onStatus: status,
        signal: ac.signal,
      });
    } catch (e) {
      if (caught) {
        // a stop asked for, as after the mount is made
        status(`${caught}: stopped before every model was mounted, unmounted ${dir}`);
        return ExitCode.ok;
      }
      const code = (e as { code?: unknown }).code;
      if (code === "FUSE_UNAVAILABLE" || code === "MOUNT_FAILED" || code === "BAD_MOUNTPOINT" || code === "ALREADY_MOUNTED") {
        throw new CliError("error", `mount ${dir}: ${(e as Error).message}${code === "FUSE_UNAVAILABLE" ? " (ollama-compat export makes the same folder from the translation cache)" : ""}`);
      }
      throw e;
    }
    if (opts.pidFile) await writeFile(opts.pidFile, `${process.pid}\n`);
    const models = mount.models();
    status(`mounted ${mount.dir}: ${models.length} model${models.length === 1 ? "" : "s"}${mount.failures().length ? `, ${mount.failures().length} not mounted` : ""}`);
    if ((opts.layout ?? "models-dir") === "models-dir") status(`serve them with: llama-server --models-dir ${mount.dir}`);
    io.out(`${mount.dir}\n`);

    await Promise.race([stopped, mount.exited]);
    if (caught) status(`${caught}, unmounting ${mount.dir}`);
    const exit = await mount.close();
    if (!caught) {
      // the daemon went away by itself: killed, or unmounted from outside (fusermount3 -u)
      const why = exit.signal ?? `exit ${exit.code}`;
      status(`the mount daemon stopped (${why})${exit.lastLines.length ? `: ${exit.lastLines[exit.lastLines.length - 1]}` : ""}`);
      return exit.code === 0 ? ExitCode.ok : ExitCode.error;
    }
    status(`unmounted ${mount.dir}`);
    return ExitCode.ok;
  } finally {
    giveBack();
    if (opts.pidFile) await rm(opts.pidFile, { force: true });
  }
}

/**
 * Starts `mount DIR` again in the background (its own session, output to the log), waits
 * until it has mounted (it writes the pid file then), and returns. A start that fails is
 * reported with the log's last lines.
 */
async function daemonize(dir: string, opts: MountFlags, io: CliIo): Promise<number> {
  const point = resolve(dir);
  const pidFile = resolve(opts.pidFile ?? `${point}.pid`);
  const log = resolve(opts.log ?? `${point}.log`);
  const running = await readFile(pidFile, "utf8").then((t) => Number(t.trim()), () => undefined);
  if (running !== undefined && processAlive(running)) throw new CliError("error", `mount ${point}: already running as pid ${running} (${pidFile}); stop it with: kill ${running}`);
  await rm(pidFile, { force: true });
  const args = [process.argv[1]!, "mount", point, "--pid-file", pidFile, "--layout", opts.layout ?? "models-dir"];
  if (opts.allowOther) args.push("--allow-other");
  if (opts.models) args.push("--models", opts.models);
  if (opts.cacheDir) args.push("--cache-dir", opts.cacheDir);
  if (opts.profile) args.push("--profile", opts.profile);
  const fd = openSync(log, "a");
  const child = spawn(process.execPath, [...process.execArgv, ...args], { detached: true, stdio: ["ignore", fd, fd], env: { ...process.env, ...io.env } });
  closeSync(fd);
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  for (;;) {
    const pid = await readFile(pidFile, "utf8").then((t) => Number(t.trim()), () => undefined);
    if (pid === child.pid) break;
    const code = await Promise.race([exited, new Promise<"wait">((r) => setTimeout(() => r("wait"), 50))]);
    if (code !== "wait") {
      const tail = (await readFile(log, "utf8").catch(() => "")).trim().split("\n").slice(-3).join("; ");
      throw new CliError("error", `mount ${point}: the background mount exited (${code}) before mounting: ${tail}`);
    }
  }
  child.unref();
  io.err(`ollama-compat: mounted ${point} in the background (pid ${child.pid}, log ${log}); stop it with: kill $(cat ${pidFile})\n`);
  io.out(`${point}\n`);
  return ExitCode.ok;
}
