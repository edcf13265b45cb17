#!/usr/bin/env node
// The mount daemon (native/mountd.c, libfuse 3) as a target of @compat/files' runNativeBuild, the
// one native-build runner (its flags: none = build from source, --if-needed = the install script,
// --optional, --prebuild). It builds build/ollama-compat-mountd, which @compat/mount runs before any
// prebuild; callers: compat-mount-build (this file as the package's bin) and `npm run build:daemon`,
// the package's `install` script (only when no prebuild runs here: another platform or CPU, an
// older glibc), and the package build (--optional --prebuild: also this platform's prebuild,
// prebuilds/<platform>-<arch>/ollama-compat-mountd).
//
// libfuse is linked statically when its archive is there (Debian's libfuse3-dev has one), so the
// prebuild needs only glibc (2.34 or later) at run time, and fusermount3 (package fuse3) to
// mount as a user other than root. libfuse is LGPL-2.1: this source and script ship with the
// package, so the daemon can be rebuilt against any libfuse 3.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const args = process.argv.slice(2);
// A source checkout's install step: `npm run build` builds, after @compat/files (whose dist this needs).
if (args.includes("--if-needed") && existsSync(join(pkgDir, "src/mount.ts"))) process.exit(0);

const NAME = "ollama-compat-mountd";
const prebuild = join(pkgDir, "prebuilds", `${process.platform}-${process.arch}`, NAME);
const { runNativeBuild } = await import("@compat/files");
process.exitCode = await runNativeBuild(
  {
    label: "mount",
    what: NAME,
    pkgDir,
    unsupported: process.platform === "linux" ? undefined : `FUSE mounts are Linux-only for now, this is ${process.platform}`,
    installed: () => (existsSync(prebuild) && spawnSync(prebuild, ["--version"], { stdio: "ignore" }).status === 0) || `no prebuilt ${NAME} runs here`,
    compile,
    prebuild: { file: NAME },
    without: "`ollama-compat mount` needs it, `serve` uses the translation cache without it",
  },
  args,
);

function compile() {
  const pkgConfig = (...flags) => spawnSync("pkg-config", [...flags, "fuse3"], { encoding: "utf8" });
  const cflags = pkgConfig("--cflags");
  if (cflags.error || cflags.status !== 0) return { failed: "libfuse 3 headers not found: install libfuse3-dev (and pkg-config)" };
  const libdir = pkgConfig("--variable=libdir").stdout.trim();
  const staticLib = libdir !== "" && existsSync(join(libdir, "libfuse3.a"));
  const libs = staticLib ? ["-Wl,-Bstatic", "-lfuse3", "-Wl,-Bdynamic", "-lpthread", "-ldl", "-lrt"] : pkgConfig("--libs").stdout.trim().split(/\s+/);
  const cc = process.env.CC || "cc";
  const file = join(pkgDir, "build", NAME);
  mkdirSync(join(pkgDir, "build"), { recursive: true });
  const ccArgs = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-D_FILE_OFFSET_BITS=64", ...cflags.stdout.trim().split(/\s+/).filter(Boolean), join(pkgDir, "native/mountd.c"), "-o", file, "-pthread", ...libs];
  const r = spawnSync(cc, ccArgs, { stdio: "inherit" });
  if (r.error || r.status !== 0) return { failed: r.error ? `${cc}: ${r.error.message}` : `${cc} exited with ${r.status}` };
  return { file, note: `libfuse ${staticLib ? "static" : "shared"}` };
}
