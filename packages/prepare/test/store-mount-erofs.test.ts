// StoreMount as root: translated files whose chunks are ranges of their blobs are links to the
// file of a kernel EROFS mount (large folios; see StoreMount), and the FUSE daemon's otherwise.
// Real kernel mounts and a real llama-server; skipped, with the probe's reason, where EROFS
// mounts cannot be made (not root, no CAP_SYS_ADMIN, a kernel without file-backed EROFS).
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { chmod, lstat, readdir, readFile, readlink, rm, stat } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { translate } from "@compat/handlers";
import { probeErofs } from "@compat/mount";
import { StoreMount, type StoreMountOptions } from "@compat/prepare";
import { buildOllamaStore } from "@compat/store";
import { fileDigest, findLlamaTools, generateFixtureFiles, SMALL_SERVER_ARGS, startLlamaServer, writeWideFixture } from "@compat/testkit";
import { tempDirs } from "./helpers";

const temp = tempDirs();
const mounts: StoreMount[] = [];
afterAll(async () => {
  for (const m of mounts) await m.close().catch(() => undefined);
});

/** The EROFS mount points under `dir` (/proc/self/mountinfo). */
async function erofsMountsUnder(dir: string): Promise<string[]> {
  return (await readFile("/proc/self/mountinfo", "utf8"))
    .split("\n")
    .filter((l) => l.split(" - ")[1]?.startsWith("erofs "))
    .map((l) => l.split(" ")[4]!)
    .filter((p) => p.startsWith(dir + "/"));
}

/** The pid of the mount daemon serving `point` (found by its command line). */
function mountdOf(point: string): number | undefined {
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const argv = readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0");
      if (argv[0]?.endsWith("ollama-compat-mountd") && argv[1] === point) return Number(p);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

/**
 * A store with a fixture (Ollama's layout; gemma3 with its vision tower in the blob) whose
 * feed-forward tensors are 4 MiB each, so that whole 2 MiB chunks of the translation are
 * ranges of the blob: the toy fixture's tensors are a few KiB, every chunk of it a copy.
 */
async function wideGemma3Store(arch = "gemma3", variant = "4b-vision", opts: { widerVision?: boolean } = {}): Promise<{ root: string; blob: string }> {
  const blob = await writeWideFixture(await temp(), arch, variant, opts);
  const root = await temp();
  await buildOllamaStore(root, [{ name: `${arch}:wide`, model: blob }]);
  return { root, blob };
}

/** `translate`'s output for the blob, written to a file. */
async function translated(blob: string): Promise<string> {
  const view = await translate(blob);
  const out = join(await temp(), "copy.gguf");
  await view!.writeTo(out);
  await view!.close();
  return out;
}

async function open(dir: string, opts: Omit<StoreMountOptions, "dir" | "sidecarDir">): Promise<StoreMount> {
  const m = await StoreMount.open({ dir: join(dir, "mnt"), sidecarDir: join(dir, "sidecars"), rescanMs: 0, ...opts });
  mounts.push(m);
  return m;
}

const probe = await probeErofs(await temp());
const refused = probe.usable ? undefined : probe.reason;
if (refused !== undefined) console.warn(`StoreMount EROFS tests skipped: ${refused}`);

describe.skipIf(refused !== undefined)("StoreMount serves translated files from EROFS mounts (root)", () => {
  it("links the translated text to its EROFS mount's file, bytes equal to translate's; llama-server maps that file; drop and close leave no mount", async () => {
    const { root, blob } = await wideGemma3Store();
    const dir = await temp();
    const erofsDir = join(dir, "erofs");
    const status: string[] = [];
    const mount = await open(dir, { store: root, onStatus: (l) => status.push(l) });
    const m = mount.models()[0]!;
    expect(m.prepared.translated).toBe(true);
    const target = await readlink(m.prepared.modelPath);
    expect(target.startsWith(erofsDir + "/mnt/")).toBe(true);
    expect(await erofsMountsUnder(erofsDir)).toEqual([dirname(target)]);
    expect(status.some((l) => /^mount: translated files from kernel EROFS mounts/.test(l))).toBe(true);
    expect(status.some((l) => l.startsWith("gemma3:wide -> ") && l.includes("text EROFS"))).toBe(true);
    // the image: its content key's, in the EROFS folder, metadata only (the seams are read from the daemon's file)
    const key = dirname(target).split("/").pop()!;
    expect((await readdir(erofsDir)).filter((f) => f.endsWith(".img"))).toEqual([`${key}.img`]);
    expect((await stat(join(erofsDir, `${key}.img`))).size).toBeLessThanOrEqual(4 * 4096);
    // the daemon's file of it is a device of the EROFS mount, in a folder the mount does not list
    expect((await stat(join(mount.dir, ".erofs", key))).size % 4096).toBe(0);
    expect(await readdir(mount.dir)).not.toContain(".erofs");
    expect(await fileDigest(m.prepared.modelPath)).toBe(await fileDigest(await translated(blob)));
    // this fixture's projector is mostly not ranges of the blob (tiny tensors): it stays the FUSE daemon's
    expect((await lstat(m.prepared.mmproj!)).isFile()).toBe(true);

    const { server } = await findLlamaTools();
    const child = spawn(server, ["--model", m.prepared.modelPath, "--mmproj", m.prepared.mmproj!, "--port", "0", "--host", "127.0.0.1", "-c", "512", ...SMALL_SERVER_ARGS], { stdio: ["ignore", "pipe", "pipe"] });
    let log = "";
    child.stdout.on("data", (d: Buffer) => (log += d));
    child.stderr.on("data", (d: Buffer) => (log += d));
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    try {
      let healthy = false;
      for (let i = 0; i < 1200 && !healthy && child.exitCode === null; i++) {
        const port = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log)?.[1];
        if (port !== undefined) healthy = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false);
        if (!healthy) await new Promise((r) => setTimeout(r, 250));
      }
      expect(healthy, log.slice(-2000)).toBe(true);
      // opened through the FUSE path, the file llama-server maps is the kernel's EROFS file
      const maps = await readFile(`/proc/${child.pid}/maps`, "utf8");
      expect(maps.split("\n").some((l) => l.endsWith(` ${target}`)), maps).toBe(true);
    } finally {
      child.kill("SIGKILL");
      await exited;
    }

    // a second mount of the same store reuses the image, and shares nothing else
    const image = join(erofsDir, `${dirname(target).split("/").pop()}.img`);
    const written = (await stat(image, { bigint: true })).mtimeNs;
    const again = await open(await temp(), { store: root, erofsDir });
    const target2 = await readlink(again.models()[0]!.prepared.modelPath);
    expect(target2).not.toBe(target);
    expect((await stat(image, { bigint: true })).mtimeNs).toBe(written);
    expect(await fileDigest(target2)).toBe(await fileDigest(target));
    await again.close();
    expect(await erofsMountsUnder(erofsDir)).toEqual([dirname(target)]);

    // the model removed from the store: its EROFS mount goes with it
    await rm(join(root, "manifests"), { recursive: true });
    await mount.rescan();
    expect(mount.models()).toEqual([]);
    expect(await erofsMountsUnder(erofsDir)).toEqual([]);
    await mount.close();
    expect(await erofsMountsUnder(erofsDir)).toEqual([]);
    expect(await readdir(join(erofsDir, "mnt"))).toEqual([]);
  }, 600_000);

  it("a text GGUF with computed tensors (qwen35: norms +1) and seams: nothing written before it is read, its image is metadata, its bytes are translate's, llama-server loads it", async () => {
    const { root, blob } = await wideGemma3Store("qwen35", "9b");
    const dir = await temp();
    const mount = await open(dir, { store: root });
    const m = mount.models()[0]!;
    const target = await readlink(m.prepared.modelPath);
    expect(target.startsWith(join(dir, "erofs", "mnt") + "/")).toBe(true);
    // mounting wrote the image only: metadata (the computed chunks and the seams are the daemon's file's)
    const bytesUnder = async (d: string) => {
      let n = 0;
      for (const f of await readdir(d, { recursive: true })) {
        const st = await stat(join(d, f));
        if (st.isFile()) n += st.size;
      }
      return n;
    };
    expect((await readdir(join(dir, "sidecars"), { recursive: true })).filter((f) => f.endsWith(".bin"))).toEqual([]);
    const images = (await readdir(join(dir, "erofs"))).filter((f) => f.endsWith(".img"));
    expect(images.length).toBe(1);
    expect((await stat(join(dir, "erofs", images[0]!))).size).toBeLessThanOrEqual(4 * 4096);
    // read through the EROFS mount: the computed tensors filled by the daemon on first read, as over FUSE
    expect(await fileDigest(m.prepared.modelPath)).toBe(await fileDigest(await translated(blob)));
    expect((await readdir(join(dir, "sidecars"), { recursive: true })).filter((f) => f.endsWith(".bin")).length).toBe(3);
    // disk added: the image and the computed tensors (3 x 128 bytes, with their digests and records)
    expect(await bytesUnder(join(dir, "sidecars"))).toBeLessThan(4096);
    const server = await startLlamaServer({ model: m.prepared.modelPath });
    await server.stop();
    await mount.close();
    expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]);
  }, 300_000);

  it("a projector mostly ranges of its blob (a wider vision MLP) is an EROFS mount's file too: bytes as FUSE serves them, its computed tensors filled on first read, llama-server loads it", async () => {
    const { root } = await wideGemma3Store("gemma3", "4b-vision", { widerVision: true });
    const viaFuse = await open(await temp(), { store: root, erofs: false });
    const want = await fileDigest(viaFuse.models()[0]!.prepared.mmproj!);
    await viaFuse.close();
    const dir = await temp();
    const status: string[] = [];
    const mount = await open(dir, { store: root, onStatus: (l) => status.push(l) });
    const m = mount.models()[0]!;
    const text = await readlink(m.prepared.modelPath);
    const mmproj = await readlink(m.prepared.mmproj!);
    expect(status.some((l) => l.includes("text EROFS; mmproj EROFS")), status.join("\n")).toBe(true);
    expect((await erofsMountsUnder(join(dir, "erofs"))).sort()).toEqual([dirname(text), dirname(mmproj)].sort());
    // nothing computed up front: the projector's promoted tensors are filled when read
    expect((await readdir(join(dir, "sidecars"), { recursive: true })).filter((f) => f.endsWith(".bin"))).toEqual([]);
    expect(await fileDigest(m.prepared.mmproj!)).toBe(want);
    expect((await readdir(join(dir, "sidecars"), { recursive: true })).filter((f) => f.endsWith(".bin")).length).toBeGreaterThan(0);
    const server = await startLlamaServer({ model: m.prepared.modelPath, mmproj: m.prepared.mmproj! });
    await server.stop();
    await mount.close();
    expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]);
  }, 300_000);

  it("close() takes the EROFS mounts down before the daemon; a daemon that dies is restarted with its EROFS mounts made again over the new one's files", async () => {
    const { root, blob } = await wideGemma3Store("qwen35", "9b");
    const copy = await fileDigest(await translated(blob));
    const dir = await temp();
    const status: string[] = [];
    const mount = await open(dir, { store: root, restart: true, onStatus: (l) => status.push(l) });
    const m = mount.models()[0]!;
    const before = await erofsMountsUnder(join(dir, "erofs"));
    expect(before.length).toBe(1);
    const daemon = mountdOf(mount.dir);
    expect(daemon).toBeDefined();
    process.kill(daemon!, "SIGKILL");
    for (let i = 0; i < 600 && !status.some((l) => l.includes("mounted the store again")); i++) await new Promise((r) => setTimeout(r, 50));
    expect(status.some((l) => l.includes("mounted the store again")), status.join("\n")).toBe(true);
    expect(mountdOf(mount.dir)).not.toBe(daemon);
    // one EROFS mount, over the new daemon's file: every byte reads, the computed ones filled by it
    expect((await erofsMountsUnder(join(dir, "erofs"))).length).toBe(1);
    expect(await fileDigest(m.prepared.modelPath)).toBe(copy);
    await mount.close();
    expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]);
    expect((await readFile("/proc/self/mountinfo", "utf8")).split("\n").some((l) => l.split(" ")[4] === mount.dir)).toBe(false);
  }, 300_000);

  it("serve's lazy planning (recorded facts): a model planned on first use gets its EROFS mount then, reusing the image", async () => {
    const { root } = await wideGemma3Store();
    const dir = await temp();
    const factsDir = join(dir, "facts");
    const first = await open(dir, { store: root, factsDir });
    const image = (await readdir(join(dir, "erofs"))).filter((f) => f.endsWith(".img"));
    expect(image.length).toBe(1);
    const written = (await stat(join(dir, "erofs", image[0]!), { bigint: true })).mtimeNs;
    await first.close();
    const status: string[] = [];
    const later = await open(dir, { store: root, factsDir, onStatus: (l) => status.push(l) });
    const m = later.models()[0]!;
    expect(later.notYetPlanned(m.prepared.modelPath)).toBe(true);
    expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]); // nothing mounted before first use
    await later.ready(m.prepared.resolved);
    const target = await readlink(m.prepared.modelPath);
    expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([dirname(target)]);
    expect((await stat(join(dir, "erofs", image[0]!), { bigint: true })).mtimeNs).toBe(written);
    expect(status.some((l) => l.includes("text EROFS"))).toBe(true);
    await later.close();
    expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]);
  }, 300_000);

  it("allow-other: EROFS only where other users can reach its folder, else FUSE with the reason", async () => {
    const { root } = await wideGemma3Store();
    const dir = await temp(); // mkdtemp: 0700
    const status: string[] = [];
    const closed = await open(dir, { store: root, allowOther: true, onStatus: (l) => status.push(l) });
    expect((await lstat(closed.models()[0]!.prepared.modelPath)).isFile()).toBe(true);
    expect(status.some((l) => l.startsWith(`mount: translated files from the FUSE daemon: other users cannot reach ${dir} (allow-other)`)), status.join("\n")).toBe(true);
    await closed.close();
    await chmod(dir, 0o755);
    const reachable = await open(dir, { store: root, allowOther: true });
    expect((await lstat(reachable.models()[0]!.prepared.modelPath)).isSymbolicLink()).toBe(true);
    await reachable.close();
    expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]);
  }, 300_000);

  it("close() detaches an EROFS mount a process still has open: what it read stays readable", async () => {
    const { root } = await wideGemma3Store();
    const dir = await temp();
    const mount = await open(dir, { store: root });
    const target = await readlink(mount.models()[0]!.prepared.modelPath);
    const { open: openFile } = await import("node:fs/promises");
    const held = await openFile(target, "r");
    try {
      const head = Buffer.alloc(4);
      await held.read(head, 0, 4, 0);
      await mount.close();
      expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]);
      // detached, its cached pages still there for whoever has it open (the header's chunk is
      // the daemon's, gone with it: not read again, as over FUSE, a process must stop first)
      const again = Buffer.alloc(4);
      const { bytesRead } = await held.read(again, 0, 4, 0);
      expect(bytesRead).toBe(4);
      expect(again).toEqual(head);
    } finally {
      await held.close();
    }
  }, 300_000);

  it("a mount killed with SIGKILL leaves its EROFS mount, which the next open takes down", async () => {
    const { root } = await wideGemma3Store();
    const dir = await temp();
    const script = fileURLToPath(new URL("./store-mount-erofs-child.ts", import.meta.url));
    const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
    const child = spawn(process.execPath, ["--import", tsx, script, root, dir], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d));
    child.stderr.on("data", (d: Buffer) => (err += d));
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    for (let i = 0; i < 2400 && !out.includes("\n") && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
    expect(out, err).toContain("\n");
    const { target } = JSON.parse(out) as { target: string };
    child.kill("SIGKILL");
    await exited;
    const erofsDir = join(dir, "erofs");
    expect(await erofsMountsUnder(erofsDir)).toEqual([dirname(target)]);

    const status: string[] = [];
    // the same EROFS folder (beside the same sidecars); another FUSE mount point, as the killed
    // one's daemon may still be unmounting its own when this starts
    const mount = await StoreMount.open({ dir: join(dir, "mnt2"), sidecarDir: join(dir, "sidecars"), store: root, rescanMs: 0, onStatus: (l) => status.push(l) });
    mounts.push(mount);
    expect(status.some((l) => l.startsWith("mount: took down 1 EROFS mount") && l.includes(dirname(target))), status.join("\n")).toBe(true);
    const now = await erofsMountsUnder(erofsDir);
    expect(now).not.toContain(dirname(target));
    expect(now.length).toBe(1); // this mount's own
    expect(await readdir(join(erofsDir, "mnt"))).toEqual([dirname(now[0]!).split("/").pop()]);
    await mount.close();
    expect(await erofsMountsUnder(erofsDir)).toEqual([]);
  }, 300_000);

  it("falls back to FUSE: EROFS turned off, a file mostly not ranges of its blob, and no translation at all (OLLAMA_LLAMA_CPP_COMPAT=0)", async () => {
    const { root, blob } = await wideGemma3Store();
    const copy = await fileDigest(await translated(blob));
    for (const opts of [{ erofs: false }, { env: { ...process.env, OLLAMA_COMPAT_EROFS: "0" } }]) {
      const dir = await temp();
      const status: string[] = [];
      const mount = await open(dir, { store: root, ...opts, onStatus: (l) => status.push(l) });
      const m = mount.models()[0]!;
      expect((await lstat(m.prepared.modelPath)).isFile()).toBe(true);
      expect(await fileDigest(m.prepared.modelPath)).toBe(copy);
      expect(status.some((l) => /^mount: translated files from the FUSE daemon: EROFS turned off/.test(l))).toBe(true);
      await mount.close();
      expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]);
    }
    // the toy fixture: every chunk would be a copy
    const small = await temp();
    const fx = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "1b" }, await temp());
    await buildOllamaStore(small, [{ name: "gemma3:1b", model: fx.text }]);
    const status: string[] = [];
    const dir = await temp();
    const mount = await open(dir, { store: small, onStatus: (l) => status.push(l) });
    expect((await lstat(mount.models()[0]!.prepared.modelPath)).isFile()).toBe(true);
    expect(status.some((l) => l.startsWith("gemma3:1b -> ") && /text FUSE: 1 of its 1 2 MiB chunks are not ranges/.test(l)), status.join("\n")).toBe(true);
    expect(await erofsMountsUnder(join(dir, "erofs"))).toEqual([]);
    await mount.close();
    // compat off: the store's own file, as it is
    const off = await open(await temp(), { store: root, env: { ...process.env, OLLAMA_LLAMA_CPP_COMPAT: "0" } });
    const m = off.models()[0]!;
    expect(m.prepared.translated).toBe(false);
    expect(await readlink(m.prepared.modelPath)).toBe(m.prepared.resolved.modelPath);
    await off.close();
  }, 600_000);
});
