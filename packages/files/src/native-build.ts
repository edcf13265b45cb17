// The one native-build runner: what building a package's native part from source means, for
// every package that carries one (@compat/tensor-ops' N-API addon, @compat/mount's FUSE daemon).
// Each package's build script only describes its target (how to compile it, how to tell that an
// installed copy runs, what the user has without it); the flags, the install-time rules, the
// prebuild's atomic placement and the messages are this file's. It ships in this package's
// dist, so an installed tarball builds its native part with it like a source checkout does.
import { copyFile, mkdir, open, rm } from "node:fs/promises";
import { join, relative } from "node:path";
import { replaceAtomically } from "./atomic-file";

/** One native part of a package, as runNativeBuild builds it. */
export interface NativeTarget {
  /** The package's short name, in front of every message ("tensor-ops", "mount"). */
  label: string;
  /** What is built, in messages ("native kernels", "ollama-compat-mountd"). */
  what: string;
  /** The package's folder. */
  pkgDir: string;
  /** Why this machine cannot run it at all (another platform); quiet with --optional / --if-needed. */
  unsupported?: string | undefined;
  /** Why the build is turned off (an environment variable): said, then nothing is built, never an error. */
  skipped?: string | undefined;
  /** True when what is installed (a prebuild, an earlier build) runs here, otherwise why not. */
  installed(): true | string;
  /** Compiles the shipped sources into the package's build/; the file made, or why it failed. */
  compile(): { file: string; note?: string } | { failed: string };
  /** This machine's prebuild, prebuilds/<platform>-<arch>/<file>, and earlier names it replaces there. */
  prebuild: { file: string; replaces?: readonly string[] };
  /** What the user has without it, said when the build fails ("the WASM or JS kernels will be used"). */
  without: string;
}

/**
 * Builds `target` as the flags in `args` say, and returns the process exit code:
 *
 * - no flag (the package's bin, `npm run build:native`): build from source; 1 when it fails.
 * - `--if-needed` (the package's `install` script): only when nothing installed runs here (no
 *   prebuild for this platform, libc or CPU) or npm was asked to (`--build-from-source`), and a
 *   failure only warns: the package works without its native part. The caller checks for a source
 *   checkout before it loads this module (there `npm run build` builds, and this package's dist may
 *   not exist yet).
 * - `--optional`: a failure (no compiler, no headers) warns instead of failing (the package build).
 * - `--prebuild`: also places the result as this platform's prebuild, atomically (the file there
 *   is either the old build or the new one, never half copied).
 */
export async function runNativeBuild(target: NativeTarget, args: readonly string[]): Promise<number> {
  const flags = new Set(args);
  const optional = flags.has("--optional") || flags.has("--if-needed");
  const say = (message: string) => `${target.label}: ${message}`;
  const fail = (why: string): number => {
    const message = say(`cannot build ${target.what} (${why}); ${target.without}`);
    if (optional) {
      console.warn(message);
      return 0;
    }
    console.error(message);
    return 1;
  };

  if (target.skipped !== undefined) {
    console.log(say(`${target.skipped}, skipping the native build`));
    return 0;
  }
  if (target.unsupported !== undefined) return optional ? 0 : fail(target.unsupported);
  if (flags.has("--if-needed") && process.env.npm_config_build_from_source !== "true") {
    const installed = target.installed();
    if (installed === true) return 0;
    console.log(say(`${installed}; building ${target.what} from source`));
  }

  const built = target.compile();
  if ("failed" in built) return fail(built.failed);
  let shipped = "";
  if (flags.has("--prebuild")) {
    const dir = join(target.pkgDir, "prebuilds", `${process.platform}-${process.arch}`);
    await mkdir(dir, { recursive: true });
    await placeFile(built.file, join(dir, target.prebuild.file));
    // an earlier name left beside it would be picked for the wrong libc
    for (const old of target.prebuild.replaces ?? []) if (old !== target.prebuild.file) await rm(join(dir, old), { force: true });
    shipped = `, ${relative(target.pkgDir, join(dir, target.prebuild.file))}`;
  }
  console.log(say(`${target.what} built (${relative(target.pkgDir, built.file)}${shipped}${built.note !== undefined ? `; ${built.note}` : ""})`));
  return 0;
}

/** Copies `from` over `to` atomically, mode included (a daemon stays executable), fsynced before the rename. */
async function placeFile(from: string, to: string): Promise<void> {
  await replaceAtomically(to, async (tmp) => {
    await copyFile(from, tmp);
    const fh = await open(tmp, "r+");
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  });
}
