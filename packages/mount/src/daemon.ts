import { accessSync, constants, existsSync } from "node:fs";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The daemon's file name: built from native/mountd.c, shipped in prebuilds/<platform>-<arch>/. */
const DAEMON_NAME = "ollama-compat-mountd";

/**
 * This package's folder (in a bundle that inlines it, the installed package's): every module of
 * it (src/*.ts, dist/*.js) sits one folder below. Not a resolve of the package's own name, which
 * loads Node's package-exports resolver: about 10 ms of serve --all's start for one folder name.
 */
function packageDir(): string {
  return fileURLToPath(new URL("..", import.meta.url));
}

/**
 * The daemon to run: `$OLLAMA_COMPAT_MOUNTD`, else one built from source in this package
 * (build/), else the prebuild for this platform; undefined when there is none.
 */
export function daemonPath(env: Record<string, string | undefined> = process.env): string | undefined {
  if (env.OLLAMA_COMPAT_MOUNTD) return env.OLLAMA_COMPAT_MOUNTD;
  const dir = packageDir();
  for (const candidate of [join(dir, "build", DAEMON_NAME), join(dir, "prebuilds", `${process.platform}-${process.arch}`, DAEMON_NAME)]) {
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** Whether a mount can be made here, and if not, the one-line reason. */
export type FuseSupport = { usable: true; daemon: string } | { usable: false; reason: string };

function onPath(name: string, env: Record<string, string | undefined>): boolean {
  return (env.PATH ?? "").split(delimiter).some((d) => d !== "" && existsSync(join(d, name)));
}

/**
 * What is needed for a mount, checked without mounting: Linux, /dev/fuse that this user may
 * open, the daemon, and (not as root) fusermount3, the setuid helper that mounts for users.
 * A mount may still be refused by the kernel (a container without the capability): that is
 * MOUNT_FAILED when it is tried.
 */
export function fuseSupport(env: Record<string, string | undefined> = process.env): FuseSupport {
  if (process.platform !== "linux") {
    return { usable: false, reason: `FUSE mounts are Linux-only for now (this is ${process.platform}; see @compat/mount's README for macOS and Windows)` };
  }
  if (!existsSync("/dev/fuse")) return { usable: false, reason: "no /dev/fuse (load the fuse module; in a container, pass the device: --device /dev/fuse)" };
  try {
    accessSync("/dev/fuse", constants.R_OK | constants.W_OK);
  } catch {
    return { usable: false, reason: "not permitted to open /dev/fuse" };
  }
  const daemon = daemonPath(env);
  if (daemon === undefined) {
    return {
      usable: false,
      reason: `no ${DAEMON_NAME} for ${process.platform}-${process.arch} (install libfuse3-dev and a C compiler, then run compat-mount-build)`,
    };
  }
  try {
    accessSync(daemon, constants.X_OK);
  } catch {
    return { usable: false, reason: `${daemon} is not executable` };
  }
  if (process.getuid?.() !== 0 && !onPath("fusermount3", env)) {
    return { usable: false, reason: "fusermount3 not found (install the fuse3 package)" };
  }
  return { usable: true, daemon };
}
