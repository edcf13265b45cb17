// What a hostile probe of the store, the cache, `serve` and `verify` found (issue 27), each
// provoked as it was found, through the real command (from source, through tsx).
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, open, readFile, rm, symlink, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readGguf, writeGguf } from "@compat/gguf";
import { TranslationCache } from "@compat/prepare";
import { buildOllamaStore, isPathLike as bridgeIsPathLike, MediaType } from "@compat/store";
import { findLlamaTools, generateFixtureFiles, guardSource } from "@compat/testkit";
import { freePort } from "@compat/server-bridge";
import { isPathLike } from "../src/commands/resolve";
import { bin, collect, tsx } from "./helpers";

let dir: string;
let llamaServer: string;
const children: ChildProcess[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-cli-hostile-"));
  llamaServer = (await findLlamaTools()).server;
}, 600_000);
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

interface Started {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  closed: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** The repo's tsconfig maps @compat/* to the sources; tsx finds it from the working directory, or from here when that is elsewhere. */
const tsconfig = new URL("../../../tsconfig.json", import.meta.url).pathname;

function start(args: string[], env: Record<string, string> = {}, cwd?: string): Started {
  const child = spawn(process.execPath, ["--import", tsx, bin, ...args], { env: { ...process.env, NO_COLOR: "1", TSX_TSCONFIG_PATH: tsconfig, ...env }, cwd, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  const stdout = collect(child.stdout);
  const stderr = collect(child.stderr);
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.on("close", (code, signal) => r({ code, signal })));
  return { child, stdout, stderr, closed };
}

/** Runs the command to its end; a command still running after `ms` is killed and fails the test (a hang is the defect). */
async function run(args: string[], env: Record<string, string> = {}, ms = 90_000, cwd?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const s = start(args, env, cwd);
  const timer = setTimeout(() => s.child.kill("SIGKILL"), ms);
  const { code, signal } = await s.closed;
  clearTimeout(timer);
  expect(signal, `ollama-compat ${args.join(" ")} hung (killed after ${ms} ms); stderr: ${s.stderr()}`).toBeNull();
  return { code, stdout: s.stdout(), stderr: s.stderr() };
}

async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 120_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

let n = 0;
async function sub(): Promise<string> {
  const d = join(dir, `t${n++}`);
  await mkdir(d, { recursive: true });
  return d;
}

/** A store with an Ollama-layout gemma3 model (translatable) and a native llama (served as it is). */
async function store(extra: Parameters<typeof buildOllamaStore>[1] = []) {
  const root = await sub();
  const fixtures = await sub();
  const gemma = await generateFixtureFiles("gemma3", { seed: 41, layout: "ollama", variant: "1b" }, fixtures);
  const native = await generateFixtureFiles("llama", { seed: 41, layout: "native" }, fixtures);
  const built = await buildOllamaStore(root, [
    { name: "gemma3:1b", model: gemma.text, template: "{{ .Prompt }}", params: { num_ctx: 512 } },
    { name: "tiny:native", model: native.text },
    ...extra,
  ]);
  return { root, gemma: built[0]!, native: built[1]!, built };
}

const oneLine = (s: string) => s.trim().split("\n");
const SMALL = ["--threads", "1", "--no-warmup"];

describe("1. translate never writes over a model's own blob", () => {
  it("-o (or --mmproj) naming the blob of the MODEL being translated, directly or through a symlink: usage error, blob unchanged", async () => {
    const { root, gemma } = await store();
    const blob = gemma.blob(MediaType.model);
    const guard = await guardSource(blob);
    const link = join(await sub(), "link.gguf");
    await symlink(blob, link);
    const template = gemma.blob(MediaType.template);
    for (const out of [["-o", blob], ["-o", link], ["-o", join(await sub(), "x.gguf"), "--mmproj", blob], ["-o", template]]) {
      const r = await run(["translate", "gemma3:1b", ...out], { OLLAMA_MODELS: root });
      expect(r.code, out.join(" ")).toBe(2);
      expect(r.stderr).toMatch(out[1] === template ? /is in the Ollama store's blobs/ : /must not be the input \(.*sha256-/);
      expect(oneLine(r.stderr)).toHaveLength(1);
    }
    await guard.assertUnchanged();
    expect(readdirSync(join(root, "blobs")).filter((f) => f.endsWith(".tmp"))).toEqual([]);
  });
});

describe("3. kill -9 of serve or verify: llama-server dies with it, and verify's temp dir is swept", () => {
  it("serve: SIGKILL once it is ready leaves no llama-server behind", async () => {
    const { root } = await store();
    const s = start(["serve", "tiny:native", "--models", root, "--cache-dir", await sub(), "--llama-server", llamaServer, "--", ...SMALL]);
    await until("serve ready", () => /llama-server \(pid \d+\) ready/.test(s.stderr()));
    const pid = Number(/llama-server \(pid (\d+)\) ready/.exec(s.stderr())![1]);
    s.child.kill("SIGKILL");
    await s.closed;
    await until(`llama-server ${pid} gone`, () => !existsSync(`/proc/${pid}`), 20_000);
  });

  it("serve --all: SIGKILL leaves no router and no mount; the next serve --all removes the dead one's temp dirs", async () => {
    const { root } = await store();
    const tmp = await sub();
    const env = { TMPDIR: tmp };
    const args = ["serve", "--all", "--port", "0", "--models", root, "--cache-dir", await sub(), "--llama-server", llamaServer, "--", ...SMALL];
    const s = start(args, env);
    await until("serve --all ready", () => /Ollama API ready on .* \(llama-server router, pid \d+\)/.test(s.stderr()));
    const pid = Number(/router, pid (\d+)\)/.exec(s.stderr())![1]);
    const mine = () => readdirSync(tmp).filter((d) => /^ollama-compat-(router|mount)-/.test(d));
    expect(mine().length).toBeGreaterThan(0);
    s.child.kill("SIGKILL");
    await s.closed;
    await until(`router ${pid} gone`, () => !existsSync(`/proc/${pid}`), 20_000);
    await until("the mount gone", () => !readFileSync("/proc/mounts", "utf8").includes(tmp), 20_000);
    const left = mine();
    expect(left.length).toBeGreaterThan(0);
    const again = start(args, env);
    await until("the second serve --all ready", () => /Ollama API ready/.test(again.stderr()));
    // the second one's own folders only: the dead one's are swept
    for (const d of left) expect(mine()).not.toContain(d);
    again.child.kill("SIGTERM");
    await again.closed;
    expect(mine()).toEqual([]);
  });

  it("verify: SIGKILL while its llama-server runs; the next verify removes the dead one's temp dir", async () => {
    const { root } = await store();
    const tmp = await sub();
    const env = { OLLAMA_MODELS: root, TMPDIR: tmp };
    // a llama-server that never gets ready: verify is still waiting for it when it is killed (a real
    // one on this tiny model can be done, and verify gone with its folder, before /proc is scanned)
    const waiting = join(await sub(), "llama-server");
    await writeFile(waiting, "#!/bin/bash\nexec -a llama-server sleep 600\n", { mode: 0o755 });
    const s = start(["verify", "gemma3:1b", "--llama-server", waiting, "--", ...SMALL], env);
    const read = (path: string) => {
      try {
        return readFileSync(path, "utf8");
      } catch {
        return "";
      }
    };
    const childOf = (ppid: number): number | undefined => {
      for (const p of readdirSync("/proc").filter((x) => /^\d+$/.test(x))) {
        const stat = read(`/proc/${p}/stat`);
        if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === ppid && read(`/proc/${p}/cmdline`).includes("llama-server")) return Number(p);
      }
      return undefined;
    };
    // verify's child is first setpriv, then the parent check's shell, then the stand-in: kill
    // verify once the stand-in sleeps, so that verify is waiting for it, not still starting it
    let server: number | undefined;
    const sleeping = () => (server = childOf(s.child.pid!)) !== undefined && read(`/proc/${server}/cmdline`).startsWith("llama-server\0");
    await until("verify's llama-server", () => sleeping() || s.child.exitCode !== null);
    const verifyDirs = () => readdirSync(tmp).filter((d) => d.startsWith("ollama-compat-verify-"));
    expect(verifyDirs(), `verify ended before it was killed: ${s.stderr()}${s.stdout()}`).toHaveLength(1);
    s.child.kill("SIGKILL");
    await s.closed;
    await until(`llama-server ${server} gone`, () => !existsSync(`/proc/${server}`), 20_000);
    const left = verifyDirs();
    expect(left, `after SIGKILL: ${readdirSync(tmp).join(", ")}; verify said: ${s.stderr()}${s.stdout()}`).toHaveLength(1);
    const again = await run(["verify", "gemma3:1b", "--llama-server", llamaServer, "--", ...SMALL], env, 300_000);
    expect(again.code, again.stderr + again.stdout).toBe(0);
    expect(verifyDirs()).toEqual([]);
  }, 420_000); // the waits inside: two minutes for the stand-in, five for the real verify
});

describe("4. serve -- --host 0.0.0.0 is held to the loopback rule, and the URL printed is the real one", () => {
  it("refused without a key (one line naming the argument); with --insecure the URL says 0.0.0.0", async () => {
    const { root } = await store();
    const refused = await run(["serve", "tiny:native", "--models", root, "--cache-dir", await sub(), "--llama-server", llamaServer, "--", "--host", "0.0.0.0"]);
    expect(refused.code).toBe(1);
    expect(oneLine(refused.stderr)).toHaveLength(1);
    expect(refused.stderr).toMatch(/INSECURE_BIND: refusing to serve on 0\.0\.0\.0 without an API key \(the llama-server argument --host 0\.0\.0\.0\)/);
    const s = start(["serve", "tiny:native", "--insecure", "--models", root, "--cache-dir", await sub(), "--llama-server", llamaServer, "--", ...SMALL, "--host", "0.0.0.0"]);
    await until("the URL", () => /^http:\/\/\S+$/m.test(s.stdout()));
    expect(s.stdout().trim()).toMatch(/^http:\/\/0\.0\.0\.0:\d+$/);
    s.child.kill("SIGTERM");
    await s.closed;
  });
});

describe("5. a FIFO in the store never hangs a command", () => {
  it("a FIFO as a template layer: ls lists every model, the broken one as one line; serve and detect of it fail at once", async () => {
    const { root, gemma } = await store();
    const template = gemma.blob(MediaType.template);
    await rm(template);
    execFileSync("mkfifo", [template]);
    const m = JSON.parse(await readFile(gemma.manifestPath, "utf8"));
    for (const l of m.layers) if (l.mediaType === MediaType.template) l.size = 0; // so that the size check lets it through
    await writeFile(gemma.manifestPath, JSON.stringify(m));
    const ls = await run(["ls", "--models", root, "--cache-dir", await sub()]);
    expect(ls.code, ls.stderr).toBe(0);
    const rows = oneLine(ls.stdout);
    expect(rows).toHaveLength(3);
    expect(rows.find((r) => r.startsWith("gemma3:1b"))).toMatch(/not-supported \(.*is a FIFO, not a regular file\)/);
    expect(rows.find((r) => r.startsWith("tiny:native"))).toMatch(/native$/);
    for (const args of [["detect", "gemma3:1b"], ["serve", "gemma3:1b", "--models", root, "--llama-server", llamaServer]]) {
      const r = await run(args, { OLLAMA_MODELS: root });
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.stderr).toMatch(/UNSAFE_BLOB: .*is a FIFO/);
      expect(oneLine(r.stderr)).toHaveLength(1);
    }
  });

  it("a manifest or a model layer that is a FIFO, a FIFO given as FILE: one-line errors", async () => {
    const { root, gemma, native } = await store();
    await rm(gemma.manifestPath);
    execFileSync("mkfifo", [gemma.manifestPath]);
    const blob = native.blob(MediaType.model);
    await rm(blob);
    execFileSync("mkfifo", [blob]);
    const m = JSON.parse(await readFile(native.manifestPath, "utf8"));
    for (const l of m.layers) if (l.mediaType === MediaType.model) l.size = 0;
    await writeFile(native.manifestPath, JSON.stringify(m));
    const fifo = join(await sub(), "model.gguf");
    execFileSync("mkfifo", [fifo]);
    for (const [args, expected] of [
      [["detect", "gemma3:1b"], /CORRUPT_MANIFEST: .*is a FIFO, not a manifest/],
      [["detect", "tiny:native"], /UNSAFE_BLOB: .*is a FIFO/],
      [["inspect", fifo], /INVALID_REFERENCE: ".*model\.gguf" is a FIFO, not a GGUF file/],
      [["translate", fifo, "-o", join(await sub(), "o.gguf")], /INVALID_REFERENCE: ".*model\.gguf" is a FIFO, not a GGUF file/],
    ] as const) {
      const r = await run([...args], { OLLAMA_MODELS: root });
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.stderr, args.join(" ")).toMatch(expected);
      expect(oneLine(r.stderr)).toHaveLength(1);
    }
    const ls = await run(["ls", "--models", root, "--cache-dir", await sub()]);
    expect(ls.code).toBe(0);
    expect(oneLine(ls.stdout)).toHaveLength(3);
  });
});

describe("7. a stale lock naming a live, unrelated PID", () => {
  it("serve says what it waits for (pid 1, a lock it cannot check), and SIGTERM still stops it", async () => {
    const { root, gemma } = await store();
    const cacheDir = await sub();
    // --cache-dir is the cache root, as OLLAMA_COMPAT_CACHE: translations live in its translated/
    const translated = join(cacheDir, "translated");
    const key = new TranslationCache({ dir: translated }).keyFor(gemma.layers.find((l) => l.mediaType === MediaType.model)!.digest, "text");
    await mkdir(join(translated, "locks"), { recursive: true });
    await writeFile(join(translated, "locks", `${key}.lock`), "1 0123456789ab");
    const s = start(["serve", "gemma3:1b", "--no-mount", "--models", root, "--cache-dir", cacheDir, "--llama-server", llamaServer]);
    await until("the wait said", () => /waiting for cache entry/.test(s.stderr()));
    expect(s.stderr()).toMatch(/ollama-compat: waiting for cache entry \w+ \(text of .*\): pid 1 \(not one this machine can check: the lock is taken over if it is not refreshed within \d+ s\) is writing it; lock /);
    s.child.kill("SIGTERM");
    expect((await s.closed).code).toBe(143);
  });

  it("a lock naming PID 1 that was not refreshed for long, or naming a process that is not its writer: serve goes ahead at once", async () => {
    const { root, gemma } = await store();
    for (const lock of ["1 0123456789ab", JSON.stringify({ pid: 1, start: "2", token: "x" })]) {
      const cacheDir = await sub();
      const translated = join(cacheDir, "translated");
      const key = new TranslationCache({ dir: translated }).keyFor(gemma.layers.find((l) => l.mediaType === MediaType.model)!.digest, "text");
      await mkdir(join(translated, "locks"), { recursive: true });
      const path = join(translated, "locks", `${key}.lock`);
      await writeFile(path, lock);
      const old = new Date(Date.now() - 3600_000);
      await utimes(path, old, old);
      const s = start(["serve", "gemma3:1b", "--no-mount", "--models", root, "--cache-dir", cacheDir, "--llama-server", llamaServer, "--", ...SMALL]);
      await until("serve ready", () => /ready/.test(s.stderr()));
      expect(s.stderr()).not.toMatch(/waiting/);
      s.child.kill("SIGTERM");
      await s.closed;
    }
  });
});

describe("8. one oversized layer is one line of ls, not a failed command", () => {
  it("a 600 MiB template blob (sparse) and a manifest symlinked to /dev/zero", async () => {
    const big = await sub();
    const root = await sub();
    const fx = await generateFixtureFiles("llama", { seed: 42, layout: "native" }, big);
    const built = await buildOllamaStore(root, [
      { name: "big-template:1", model: fx.text, template: "x" },
      { name: "fine:1", model: fx.text },
    ]);
    const template = built[0]!.blob(MediaType.template);
    await rm(template);
    const fh = await open(template, "w");
    await fh.truncate(600 * 2 ** 20);
    await fh.close();
    const m = JSON.parse(await readFile(built[0]!.manifestPath, "utf8"));
    for (const l of m.layers) if (l.mediaType === MediaType.template) l.size = 600 * 2 ** 20;
    await writeFile(built[0]!.manifestPath, JSON.stringify(m));
    const zero = join(root, "manifests", "registry.ollama.ai", "library", "zero", "latest");
    await mkdir(join(zero, ".."), { recursive: true });
    await symlink("/dev/zero", zero);
    const r = await run(["ls", "--models", root, "--cache-dir", await sub()]);
    expect(r.code, r.stderr).toBe(0);
    const rows = oneLine(r.stdout);
    expect(rows).toHaveLength(4);
    expect(rows.find((l) => l.startsWith("big-template:1"))).toMatch(/not-supported \(.*is 629145600 bytes \(expected at most 4194304\)\)/);
    expect(rows.find((l) => l.startsWith("zero:latest"))).toMatch(/not-supported \(.*is a character device, not a manifest\)/);
    expect(rows.find((l) => l.startsWith("fine:1"))).toMatch(/native$/);
  });
});

describe("9. untrusted text reaches the terminal escaped, every error on one line", () => {
  const ESC = "\x1b]0;pwned\x07\x1b[2J";
  let evil: string;
  let root: string;
  beforeAll(async () => {
    const d = await sub();
    const fx = await generateFixtureFiles("llama", { seed: 43, layout: "native" }, d);
    const m = await readGguf(fx.text);
    m.setString("general.name", `${ESC}Evil\nsecond line\u009b31m`);
    m.setString("general.architecture", `llama${ESC}\n`);
    m.setString(`evil.${ESC}key`, "v\u202e");
    m.renameTensor("output_norm.weight", `output_norm${ESC}.weight`);
    evil = join(d, "evil.gguf");
    await writeGguf(m, evil);
    await m.close();
    root = await sub();
    await buildOllamaStore(root, [{ name: "evil:1", model: evil }]);
    // a manifest that is not JSON, full of escapes
    const bad = join(root, "manifests", "registry.ollama.ai", "library", "bad", "latest");
    await mkdir(join(bad, ".."), { recursive: true });
    await writeFile(bad, `${ESC}{not json\n`);
  });
  const raw = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/;

  it("detect, inspect and ls print the file's architecture, name, keys and tensor names escaped", async () => {
    for (const args of [["detect", evil], ["inspect", evil], ["inspect", evil, "--json"], ["detect", evil, "--json"], ["ls", "--models", root, "--cache-dir", await sub()], ["ls", "--json", "--models", root]]) {
      const r = await run(args, { OLLAMA_MODELS: root });
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBeLessThan(2);
      expect(r.stdout, args.join(" ")).not.toMatch(raw);
      expect(r.stderr, args.join(" ")).not.toMatch(raw);
    }
    const inspect = await run(["inspect", evil]);
    expect(inspect.stdout).toContain("llama\\x1b]0;pwned\\x07\\x1b[2J\\n");
    expect(inspect.stdout).toContain("output_norm\\x1b]0;pwned\\x07\\x1b[2J.weight");
    const ls = await run(["ls", "--models", root, "--cache-dir", await sub()]);
    expect(oneLine(ls.stdout)).toHaveLength(3);
  });

  it("errors quoting a manifest, a reference or a path are one line with no control character", async () => {
    for (const args of [["detect", "bad"], ["serve", "bad", "--llama-server", llamaServer], ["detect", `gem${ESC}ma`], ["inspect", `./no${ESC}\nfile.gguf`], ["detect", "bad", "--json"]]) {
      const r = await run(args, { OLLAMA_MODELS: root });
      expect(r.code, args.join(" ")).toBe(1);
      expect(oneLine(r.stderr), args.join(" ")).toHaveLength(1);
      expect(r.stderr, args.join(" ")).not.toMatch(raw);
    }
    const bad = await run(["detect", "bad"], { OLLAMA_MODELS: root });
    expect(bad.stderr).not.toContain("not json");
  });
});

describe("11. errors in words; one rule for FILE-or-MODEL", () => {
  // the cache's errors: --no-mount, since a mount of the store writes no translation
  it("a cache below a file: the file is named, not 'ENOTDIR: … mkdir'; on a read-only mount: EROFS (as root)", async () => {
    const { root } = await store();
    const file = join(await sub(), "plain-file");
    await writeFile(file, "x");
    const r = await run(["serve", "gemma3:1b", "--no-mount", "--models", root, "--cache-dir", join(file, "cache"), "--llama-server", llamaServer]);
    expect(r.code).toBe(1);
    // serve's status lines, then the error: one line
    expect(oneLine(r.stderr).filter((l) => !/^ollama-compat: translating /.test(l))).toHaveLength(1);
    expect(r.stderr).not.toMatch(/ENOTDIR: /);
    expect(r.stderr).toContain(`CACHE_UNWRITABLE: cannot write the translation cache ${join(file, "cache", "translated")}: ${file} is a file, not a folder (ENOTDIR)`);
    if (process.getuid?.() !== 0) return;
    const mnt = await sub();
    execFileSync("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", mnt]);
    try {
      const ro = await run(["serve", "gemma3:1b", "--no-mount", "--models", root, "--cache-dir", join(mnt, "cache"), "--llama-server", llamaServer]);
      expect(ro.code).toBe(1);
      expect(ro.stderr).toContain(`${mnt} is on a read-only file system (EROFS)`);
      expect(ro.stderr).not.toMatch(/ENOENT/);
    } finally {
      execFileSync("umount", [mnt]);
    }
  });

  it("serve --all and mount with a read-only cache (as root): CACHE_UNWRITABLE naming the sidecar folder and EROFS, at start, before any 'ready'", async () => {
    if (process.getuid?.() !== 0) return;
    const { root } = await store();
    const mnt = await sub();
    execFileSync("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", mnt]);
    try {
      const sidecars = join(mnt, "cache", "sidecars");
      const all = await run(["serve", "--all", "--models", root, "--cache-dir", join(mnt, "cache"), "--llama-server", llamaServer], { OLLAMA_HOST: `127.0.0.1:${await freePort()}` });
      expect(all.code, all.stderr).toBe(1);
      // a mount of the store (FUSE here), or the translation cache where FUSE cannot be used: either way EROFS, named
      expect(all.stderr).toMatch(new RegExp(`CACHE_UNWRITABLE: cannot write the (mount's sidecar folder ${sidecars}|translation cache ${join(mnt, "cache", "translated")}): ${mnt} is on a read-only file system \\(EROFS\\)`));
      expect(all.stderr).not.toMatch(/ENOENT|ready/);
      const point = join(await sub(), "mnt");
      const mount = await run(["mount", point, "--models", root, "--cache-dir", join(mnt, "cache")]);
      expect(mount.code, mount.stderr).toBe(1);
      if (!/FUSE|fuse/.test(mount.stderr)) expect(mount.stderr).toContain(`CACHE_UNWRITABLE: cannot write the mount's sidecar folder ${sidecars}: ${mnt} is on a read-only file system (EROFS)`);
      expect(mount.stdout).toBe("");
    } finally {
      execFileSync("umount", [mnt]);
    }
  });

  it("a folder named like the model in the working directory: detect, translate and serve all take the word as the model", async () => {
    const { root } = await store();
    const cwd = await sub();
    await mkdir(join(cwd, "gemma3:1b"));
    const detect = await run(["detect", "gemma3:1b"], { OLLAMA_MODELS: root }, 90_000, cwd);
    expect(detect.code, detect.stderr).toBe(0);
    expect(detect.stdout).toMatch(/^gemma3:1b: Ollama-format, supported \(gemma3\)/);
    const translate = await run(["translate", "gemma3:1b", "--dry-run"], { OLLAMA_MODELS: root }, 90_000, cwd);
    expect(translate.code, translate.stderr).toBe(0);
    // as a path it is the folder, refused as such by every command
    for (const args of [["detect", "./gemma3:1b"], ["inspect", "./gemma3:1b"], ["serve", "./gemma3:1b", "--llama-server", llamaServer]]) {
      const r = await run(args, { OLLAMA_MODELS: root }, 90_000, cwd);
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.stderr, args.join(" ")).toMatch(/"\.\/gemma3:1b" is a directory, not a GGUF file/);
    }
  });

  it("the CLI's copy of the rule is the bridge's", () => {
    for (const ref of ["gemma3", "gemma3:4b", "ns/model:tag", "hf.co/a/b:Q4", "./x", "/abs", "x.gguf", "X.GGUF", "a\\b", ".", "..", "x.gguf:latest", ""]) {
      expect(isPathLike(ref), ref).toBe(bridgeIsPathLike(ref));
    }
  });
});
