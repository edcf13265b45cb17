#!/usr/bin/env node
// Builds the mount daemon (native/mountd.c, libfuse 3) into build/ollama-compat-mountd, which
// @compat/mount runs before any prebuild. Three callers:
//
//   compat-mount-build (this file as the package's bin), `npm run build:daemon`: build from
//       source; exits non-zero when the build fails.
//   the package's `install` script (--if-needed): only when no prebuild runs on this machine
//       (another platform or CPU, an older glibc), and never fails the install: without a daemon,
//       `mount` says what is missing and `serve` uses the translation cache. In a source checkout
//       it does nothing (`npm run build` builds).
//   the package build (--optional --prebuild): also ships the result as this platform's
//       prebuild, prebuilds/<platform>-<arch>/ollama-compat-mountd; a missing compiler or
//       libfuse3-dev only warns.
//
// libfuse is linked statically when its archive is there (Debian's libfuse3-dev has one), so the
// prebuild needs only glibc (2.34 or later) at run time, and fusermount3 (package fuse3) to
// mount as a user other than root. libfuse is LGPL-2.1: this source and script ship with the
// package, so the daemon can be rebuilt against any libfuse 3.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const flags = new Set(process.argv.slice(2));
const optional = flags.has("--optional") || flags.has("--if-needed");
const NAME = "ollama-compat-mountd";
const prebuild = join(pkgDir, "prebuilds", `${process.platform}-${process.arch}`, NAME);

function fail(why) {
  const msg = `mount: cannot build ${NAME} (${why}); \`ollama-compat mount\` needs it, \`serve\` uses the translation cache without it`;
  if (optional) {
    console.warn(msg);
    process.exit(0);
  }
  console.error(msg);
  process.exit(1);
}

if (process.platform !== "linux") {
  if (optional) process.exit(0);
  fail(`FUSE mounts are Linux-only for now, this is ${process.platform}`);
}

if (flags.has("--if-needed")) {
  if (existsSync(join(pkgDir, "src/mount.ts"))) process.exit(0); // source checkout: the package build handles it
  if (existsSync(prebuild) && spawnSync(prebuild, ["--version"], { stdio: "ignore" }).status === 0) process.exit(0);
  console.log(`mount: no prebuilt ${NAME} runs here; building it from source`);
}

const pkgConfig = (...args) => spawnSync("pkg-config", [...args, "fuse3"], { encoding: "utf8" });
const cflags = pkgConfig("--cflags");
if (cflags.error || cflags.status !== 0) fail("libfuse 3 headers not found: install libfuse3-dev (and pkg-config)");
const libdir = pkgConfig("--variable=libdir").stdout.trim();
const staticLib = libdir && existsSync(join(libdir, "libfuse3.a"));
const libs = staticLib ? ["-Wl,-Bstatic", "-lfuse3", "-Wl,-Bdynamic", "-lpthread", "-ldl", "-lrt"] : pkgConfig("--libs").stdout.trim().split(/\s+/);
const cc = process.env.CC || "cc";
const out = join(pkgDir, "build", NAME);
mkdirSync(join(pkgDir, "build"), { recursive: true });
const args = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-D_FILE_OFFSET_BITS=64", ...cflags.stdout.trim().split(/\s+/).filter(Boolean), join(pkgDir, "native/mountd.c"), "-o", out, "-pthread", ...libs];
const r = spawnSync(cc, args, { stdio: "inherit" });
if (r.error || r.status !== 0) fail(r.error ? `${cc}: ${r.error.message}` : `${cc} exited with ${r.status}`);

let shipped = "";
if (flags.has("--prebuild")) {
  mkdirSync(join(prebuild, ".."), { recursive: true });
  copyFileSync(out, prebuild);
  shipped = `, prebuilds/${process.platform}-${process.arch}/${NAME}`;
}
console.log(`mount: ${NAME} built (build/${NAME}${shipped}; libfuse ${staticLib ? "static" : "shared"})`);
