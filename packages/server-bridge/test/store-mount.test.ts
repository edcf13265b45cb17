import { execFileSync } from "node:child_process";
import { mkdir, open as openFile, readdir, readFile, readlink, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { fileDigest, allFixtureVariants, generateFixtureFiles, runMtmdCli, SMALL_SERVER_ARGS } from "@compat/testkit";
import { cachePreparer, prepareModel, ServeMount, StoreMount, TranslationCache, type PreparedModel, type StoreMountOptions } from "@compat/prepare";
import { startRouter, startServer, type RunningServer } from "@compat/server-bridge";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { chat, chatContent, llamaServerPath, tempDirs } from "./helpers";

const temp = tempDirs();
const mounts: StoreMount[] = [];
const running: RunningServer[] = [];
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop();
});
afterAll(async () => {
  for (const m of mounts) await m.close().catch(() => undefined);
});

async function open(opts: Omit<StoreMountOptions, "dir" | "sidecarDir">): Promise<StoreMount> {
  const dir = await temp();
  const m = await StoreMount.open({ dir: join(dir, "mnt"), sidecarDir: join(dir, "sidecars"), rescanMs: 0, ...opts });
  mounts.push(m);
  return m;
}

/** An Ollama store of fixtures (Ollama layout unless `native`). */
async function fixtureStore(models: Array<{ name: string; arch: string; variant?: string; native?: boolean }>): Promise<string> {
  const root = await temp();
  const dir = await temp();
  const specs = [];
  for (const m of models) {
    const fx = await generateFixtureFiles(m.arch, { seed: 1, layout: m.native ? "native" : "ollama", ...(m.variant ? { variant: m.variant } : {}) }, join(dir, m.name.replace(/[:/]/g, "-")));
    specs.push({ name: m.name, model: fx.text, ...(fx.mmproj ? { projector: fx.mmproj } : {}), params: { num_ctx: 1024 } });
  }
  await buildOllamaStore(root, specs);
  return root;
}

describe("StoreMount: the Ollama store as a read-only FUSE mount", () => {
  it("shows every model of a store of all fixture architectures, each file equal to the cache's translation (sha256)", async () => {
    const variants = allFixtureVariants();
    const root = await fixtureStore([
      ...variants.map((v) => ({ name: `${v.arch.replace(/_/g, "-")}:${v.variant}`, arch: v.arch, variant: v.variant })),
      { name: "native-llama:1", arch: "llama", native: true },
    ]);
    const store = new ModelStore(root);
    const mount = await open({ store });
    expect(mount.failures()).toEqual([]);
    const cache = new TranslationCache({ dir: await temp() });
    let translated = 0;
    let projectors = 0;
    for (const m of mount.models()) {
      const cached = await prepareModel(m.prepared.resolved, { cache });
      expect(m.prepared.translated, m.name).toBe(cached.translated);
      expect(await fileDigest(m.prepared.modelPath), m.name).toBe(await fileDigest(cached.modelPath));
      expect(m.prepared.mmproj === undefined, m.name).toBe(cached.mmproj === undefined);
      if (cached.mmproj) expect(await fileDigest(m.prepared.mmproj!), `${m.name} mmproj`).toBe(await fileDigest(cached.mmproj));
      if (cached.translated) translated++;
      else expect(await readlink(m.prepared.modelPath)).toBe(cached.modelPath); // native: a link to its blob
      if (cached.mmproj) projectors++;
    }
    expect(mount.models().length).toBe(variants.length + 1);
    expect(translated).toBe(variants.length);
    expect(projectors).toBe(variants.filter((v) => v.vision).length);
  }, 600_000);

  it("lays models out for llama-server --models-dir and for LM Studio", async () => {
    const root = await fixtureStore([
      { name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" },
      { name: "someone/tiny:q8", arch: "llama", native: true },
    ]);
    const md = await open({ store: root });
    expect((await readdir(md.dir)).sort()).toEqual(["gemma3-4b", "someone-tiny-q8.gguf"]);
    expect((await readdir(join(md.dir, "gemma3-4b"))).sort()).toEqual(["gemma3-4b.gguf", "mmproj-gemma3-4b.gguf"]);
    const lm = await open({ store: root, layout: "lmstudio" });
    expect((await readdir(lm.dir)).sort()).toEqual(["library", "someone"]);
    expect((await readdir(join(lm.dir, "library/gemma3-4b"))).sort()).toEqual(["gemma3-4b.gguf", "mmproj-gemma3-4b.gguf"]);
    expect(await readdir(join(lm.dir, "someone/tiny-q8"))).toEqual(["tiny-q8.gguf"]);
  });

  it("picks up models added to and removed from the store while mounted", async () => {
    const root = await fixtureStore([{ name: "gemma3:1b", arch: "gemma3", variant: "1b" }]);
    const status: string[] = [];
    const dir = await temp();
    const mount = await StoreMount.open({ dir: join(dir, "mnt"), sidecarDir: join(dir, "s"), store: root, rescanMs: 100, onStatus: (l) => status.push(l) });
    mounts.push(mount);
    expect(await readdir(mount.dir)).toEqual(["gemma3-1b.gguf"]);
    const fx = await generateFixtureFiles("llama", { seed: 2, layout: "ollama" }, await temp());
    await buildOllamaStore(root, [{ name: "llama3.2:1b", model: fx.text }]);
    const until = async (want: string[]) => {
      for (let i = 0; i < 100 && JSON.stringify((await readdir(mount.dir)).sort()) !== JSON.stringify(want); i++) await new Promise((r) => setTimeout(r, 50));
      expect((await readdir(mount.dir)).sort()).toEqual(want);
    };
    await until(["gemma3-1b.gguf", "llama3.2-1b.gguf"]);
    await rm(join(root, "manifests/registry.ollama.ai/library/gemma3"), { recursive: true });
    await until(["llama3.2-1b.gguf"]);
    // said once the last of its files is gone, which a listing can see first
    for (let i = 0; i < 100 && !status.some((l) => l.includes("gemma3:1b: removed from the store")); i++) await new Promise((r) => setTimeout(r, 50));
    expect(status.some((l) => l.includes("gemma3:1b: removed from the store"))).toBe(true);
    // a model whose blob is gone is not shown
    await rm(mount.models()[0]!.prepared.resolved.modelPath);
    await until([]);
    expect(mount.failures()).toEqual([expect.objectContaining({ name: "llama3.2:1b" })]);
  });

  it("costs the headers and the computed tensors on disk, not the model", async () => {
    const root = await fixtureStore([{ name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" }]);
    const dir = await temp();
    const mount = await StoreMount.open({ dir: join(dir, "mnt"), sidecarDir: join(dir, "s"), store: root, rescanMs: 0 });
    mounts.push(mount);
    const m = mount.models()[0]!;
    await fileDigest(m.prepared.modelPath);
    await fileDigest(m.prepared.mmproj!);
    const mmprojSize = (await stat(m.prepared.mmproj!)).size;
    // closed first: a sidecar's fsync and its `.hashed` record follow its first read, and a
    // walk of the folder meanwhile can list a temp file that is renamed before its stat
    await mount.close();
    const onDisk = async (d: string): Promise<number> => {
      let n = 0;
      for (const e of await readdir(d, { withFileTypes: true, recursive: true })) if (e.isFile()) n += (await stat(join(e.parentPath, e.name))).size;
      return n;
    };
    // the gemma3 projector's promoted F32 patch and position embeddings, nothing else
    const sidecars = await onDisk(join(dir, "s"));
    expect(sidecars).toBeGreaterThan(0);
    expect(sidecars).toBeLessThan(mmprojSize);
  });

  it("parses a model once for all its computed tensors, keeps those views while they are filled and closes them with the mount", async () => {
    const root = await fixtureStore([{ name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" }]);
    /** This process's open file descriptors on `path`. */
    const fdsOn = async (path: string): Promise<number> => {
      let n = 0;
      for (const fd of await readdir("/proc/self/fd")) if ((await readlink(join("/proc/self/fd", fd)).catch(() => "")) === path) n++;
      return n;
    };
    for (const viewsKept of [2, 0]) {
      const mount = await open({ store: root, viewsKept });
      const m = mount.models()[0]!;
      const blob = m.prepared.resolved.modelPath;
      expect(await fdsOn(blob)).toBe(0); // planned, and the planning views closed
      await fileDigest(m.prepared.mmproj!); // fills the projector's promoted tensors (two sidecars)
      // kept: the fills' one parse stays open for the model's next fills; not kept: each fill closed its own
      expect(await fdsOn(blob)).toBe(viewsKept > 0 ? 1 : 0);
      await mount.close();
      expect(await fdsOn(blob)).toBe(0);
    }
  });
});

/** A store of `n` models that share one blob (tags of one model, as a mirror of a registry has thousands of). */
async function manyModels(n: number): Promise<string> {
  const root = await fixtureStore([{ name: "tiny:0", arch: "llama", native: true }]);
  const manifest = await readFile(join(root, "manifests/registry.ollama.ai/library/tiny/0"));
  for (let i = 1; i < n; i++) {
    const dir = join(root, "manifests/registry.ollama.ai/library", `tiny${i}`);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "latest"), manifest);
  }
  return root;
}

describe("StoreMount when the sidecar folder is full", () => {
  it("a sidecar that cannot be written for lack of space fails that read with EIO; once space is free the next read succeeds, same mount (as root: a full tmpfs)", async () => {
    if (process.getuid?.() !== 0) return;
    const root = await fixtureStore([{ name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" }]);
    const dir = await temp();
    const small = join(dir, "small");
    await mkdir(small);
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=16m", "tmpfs", small]);
    let mount: StoreMount | undefined;
    try {
      const sidecarDir = join(small, "sidecars");
      await mkdir(sidecarDir);
      // every byte of it taken
      const filler = join(small, "filler");
      const fh = await openFile(filler, "w");
      try {
        for (;;) await fh.write(Buffer.alloc(256 << 10));
      } catch (e) {
        expect((e as NodeJS.ErrnoException).code).toBe("ENOSPC");
      } finally {
        await fh.close();
      }
      mount = await StoreMount.open({ dir: join(dir, "mnt"), sidecarDir, store: root, rescanMs: 0 });
      const m = mount.models()[0]!;
      await expect(fileDigest(m.prepared.mmproj!)).rejects.toMatchObject({ code: "EIO" });
      await rm(filler);
      const cached = await prepareModel(m.prepared.resolved, { cache: new TranslationCache({ dir: await temp() }) });
      expect(await fileDigest(m.prepared.mmproj!)).toBe(await fileDigest(cached.mmproj!));
    } finally {
      await mount?.close();
      execFileSync("umount", ["-l", small]);
    }
  }, 600_000);
});

describe("StoreMount on a store of thousands of models", () => {
  it("rescans asked for faster than they run coalesce (one runs, one waits); a new model is seen by the watch of manifests/, not the timer; close() runs no backlog", async () => {
    const root = await manyModels(2000);
    const dir = await temp();
    // the timer would look in an hour: what is seen before comes from the watch
    const mount = await StoreMount.open({ dir: join(dir, "mnt"), sidecarDir: join(dir, "s"), store: root, rescanMs: 3_600_000 });
    mounts.push(mount);
    expect(mount.models()).toHaveLength(2000);
    expect(mount.rescans).toBe(1);

    // fifty changes while a rescan runs: one more rescan after it, not fifty
    const asked = Array.from({ length: 50 }, () => mount.rescan());
    await Promise.all(asked);
    expect(mount.rescans).toBeLessThanOrEqual(3);

    const fx = await generateFixtureFiles("llama", { seed: 3, layout: "ollama" }, await temp());
    await buildOllamaStore(root, [{ name: "late:1b", model: fx.text }]);
    for (let i = 0; i < 1200 && !mount.models().some((m) => m.name === "late:1b"); i++) await new Promise((r) => setTimeout(r, 100));
    expect(mount.models().map((m) => m.name)).toContain("late:1b");

    // a blob come or gone resolves every manifest again; closing meanwhile waits for none of the rescans asked for
    await writeFile(join(root, "blobs", "partial"), "x");
    const before = mount.rescans;
    const pending = Array.from({ length: 50 }, () => mount.rescan().catch((e: unknown) => e));
    await mount.close();
    await Promise.all(pending);
    expect(mount.rescans - before).toBeLessThanOrEqual(2);
    expect(mount.alive).toBe(false);
  }, 600_000);
});

describe("serving from the mount (real llama.cpp)", () => {
  it("llama-server serves a vision model straight from the mount, and llama-mtmd-cli answers an image with the mounted pair", async () => {
    const root = await fixtureStore([{ name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" }]);
    const mount = await open({ store: root });
    const server = await startServer({ model: "gemma3:4b", store: root, mount, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS });
    running.push(server);
    expect(server.model.modelPath.startsWith(mount.dir + "/")).toBe(true);
    expect(server.command).toEqual(expect.arrayContaining(["--model", server.model.modelPath, "--mmproj", server.model.mmproj!]));
    const r = await chat(server.url, "gemma3:4b");
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(typeof chatContent(r.body), JSON.stringify(r.body)).toBe("string");
    await server.stop();

    const dir = await temp();
    const side = 64;
    const image = join(dir, "grey.ppm");
    const { writeFile } = await import("node:fs/promises");
    await writeFile(image, Buffer.concat([Buffer.from(`P6\n${side} ${side}\n255\n`), Buffer.alloc(side * side * 3, 128)]));
    const run = await runMtmdCli({ model: server.model.modelPath, mmproj: server.model.mmproj!, image, prompt: "Describe.", args: ["--chat-template", "gemma"] });
    expect(run.ok, run.stderr.slice(-3000)).toBe(true);
    expect(run.stderr).toMatch(/encoding mtmd batch/);
  });

  it("the router serves every model of a store from the mount, started before any model is read", async () => {
    const root = await fixtureStore([
      { name: "gemma3:1b", arch: "gemma3", variant: "1b" },
      { name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" },
      { name: "llama3.2:1b", arch: "llama" },
      { name: "native-llama:1", arch: "llama", native: true },
    ]);
    const mount = await open({ store: root });
    const router = await startRouter({ models: "all", store: root, mount, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, keepPreset: true });
    running.push(router);
    expect(router.models.map((m) => m.name).sort()).toEqual(["gemma3:1b", "gemma3:4b", "llama3.2:1b", "native-llama:1"]);
    for (const m of router.models) expect(m.model!.modelPath.startsWith(mount.dir + "/"), m.name).toBe(true);
    for (const m of router.models) {
      const r = await chat(router.url, m.name);
      expect(r.status, `${m.name}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(typeof chatContent(r.body), JSON.stringify(r.body)).toBe("string");
    }
  });

  it("ServeMount: a model the mount has planned is not parsed again, and a native one still gets its own blob, as before the mount was open", async () => {
    const root = await fixtureStore([
      { name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" },
      { name: "native-llama:1", arch: "llama", native: true },
    ]);
    const store = new ModelStore(root);
    const serveMount = async (order: string[]) => {
      const dir = await temp();
      const sm = new ServeMount({ store, env: { ...process.env, OLLAMA_COMPAT_CACHE: join(dir, "cache") }, sidecarDir: join(dir, "sidecars"), rescanMs: 0, fallback: cachePreparer({ cache: new TranslationCache({ dir: join(dir, "cache") }) }) });
      const out = new Map<string, PreparedModel>();
      try {
        for (const name of order) out.set(name, await sm.prepare(await store.resolve(name)));
        const dirOf = (await sm.mounted())!.dir;
        return { out, dirOf };
      } finally {
        await sm.close();
      }
    };
    // the translated model first: the mount opens and plans both, so the native one comes from what it planned
    const planned = await serveMount(["gemma3:4b", "native-llama:1"]);
    // the native model first: its header is parsed before any mount exists
    const parsed = await serveMount(["native-llama:1", "gemma3:4b"]);
    const native = planned.out.get("native-llama:1")!;
    expect(native.modelPath).toBe((await store.resolve("native-llama:1")).modelPath);
    expect(native).toEqual(parsed.out.get("native-llama:1"));
    const vision = planned.out.get("gemma3:4b")!;
    expect(vision.translated).toBe(true);
    expect(vision.modelPath.startsWith(planned.dirOf + "/")).toBe(true);
    expect(vision.mmproj!.startsWith(planned.dirOf + "/")).toBe(true);
    const other = parsed.out.get("gemma3:4b")!;
    expect({ ...vision, modelPath: "", mmproj: "" }).toEqual({ ...other, modelPath: "", mmproj: "" });
  });

  it("ServeMount: the router's listing of the store is the mount's first scan (the store is read once at start); a model added later is shown by the next rescan", async () => {
    const root = await fixtureStore([{ name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" }]);
    // the real store, counting its scans of manifests/
    class CountedStore extends ModelStore {
      scans = 0;
      override scan(rollbacks?: boolean) {
        this.scans++;
        return super.scan(rollbacks);
      }
    }
    const store = new CountedStore(root);
    const dir = await temp();
    const sm = new ServeMount({ store, env: { ...process.env, OLLAMA_COMPAT_CACHE: join(dir, "cache") }, sidecarDir: join(dir, "sidecars"), rescanMs: 0, fallback: cachePreparer({ cache: new TranslationCache({ dir: join(dir, "cache") }) }) });
    try {
      const listed = await sm.list();
      expect(listed).toEqual(await new ModelStore(root).list());
      const prepared = await sm.prepare(listed[0]!.model!);
      await sm.settled();
      const mount = (await sm.mounted())!;
      expect(prepared.modelPath.startsWith(mount.dir + "/")).toBe(true);
      expect(mount.models().map((m) => m.name)).toEqual(["gemma3:4b"]);
      expect(store.scans).toBe(1);
      const fx = await generateFixtureFiles("llama", { seed: 2, layout: "ollama" }, await temp());
      await buildOllamaStore(root, [{ name: "llama3.2:1b", model: fx.text }]);
      await mount.rescan();
      expect(store.scans).toBe(2);
      expect(mount.models().map((m) => m.name).sort()).toEqual(["gemma3:4b", "llama3.2:1b"]);
    } finally {
      await sm.close();
    }
  });

  it("ServeMount: a model with recorded facts is handed out at the mount's paths before the daemon has mounted; a mount that then fails is the start's error, not a model that cannot be opened later", async () => {
    const root = await fixtureStore([{ name: "gemma3:4b", arch: "gemma3", variant: "4b-vision" }]);
    const store = new ModelStore(root);
    const dir = await temp();
    const cache = join(dir, "cache");
    const make = (env: Record<string, string | undefined>) =>
      new ServeMount({ store, env: { ...process.env, OLLAMA_COMPAT_CACHE: cache, ...env }, sidecarDir: join(dir, "sidecars"), rescanMs: 0, fallback: cachePreparer({ cache: new TranslationCache({ dir: cache }) }) });
    // a first start parses the header and records the model's facts
    const first = make({});
    try {
      await first.prepare(await store.resolve("gemma3:4b"));
      await first.settled();
    } finally {
      await first.close();
    }
    // a daemon that exits at once: FUSE looks usable, the mount fails only when it is tried
    const failing = join(dir, "failing-mountd");
    await writeFile(failing, "#!/bin/sh\nexit 1\n", { mode: 0o755 });
    const second = make({ OLLAMA_COMPAT_MOUNTD: failing });
    try {
      const prepared = await second.prepare(await store.resolve("gemma3:4b"));
      expect(prepared.translated).toBe(true);
      expect(prepared.modelPath).toMatch(/\/ollama-compat-mount-[^/]+\/models\//);
      // the router may look at the projector before the model is planned: expected, not an error
      expect(second.notYetPlanned(prepared.mmproj!)).toBe(true);
      await expect(second.settled()).rejects.toMatchObject({ code: "MOUNT_FAILED" });
      await expect(second.ready(await store.resolve("gemma3:4b"))).rejects.toMatchObject({ code: "MOUNT_FAILED" });
    } finally {
      await second.close();
    }
    // a router started on such paths (its preparation answers before the daemon can have exited):
    // its start fails with the mount's error, the router stopped
    const third = make({ OLLAMA_COMPAT_MOUNTD: failing });
    try {
      await expect(startRouter({ models: "all", store: root, mount: third, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS })).rejects.toMatchObject({ code: "MOUNT_FAILED" });
    } finally {
      await third.close();
    }
  });
});
