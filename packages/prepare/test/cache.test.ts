import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import { open, readdir, readFile, rm, stat, writeFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readGguf } from "@compat/gguf";
import { translate } from "@compat/handlers";
import { generateFixtureFiles } from "@compat/testkit";
import { PrepareError, prepareModel, TranslationCache } from "@compat/prepare";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { tempDirs } from "./helpers";

const temp = tempDirs();

/** A store with Ollama-layout gemma3 models (they need translating) under gemma3:s<seed>. */
async function gemmaStore(seeds: number[]): Promise<ModelStore> {
  const root = await temp();
  const fixtures = await temp();
  const specs = [];
  for (const seed of seeds) {
    const fx = await generateFixtureFiles("gemma3", { seed, layout: "ollama", variant: "1b" }, fixtures);
    specs.push({ name: `gemma3:s${seed}`, model: fx.text });
  }
  await buildOllamaStore(root, specs);
  return new ModelStore(root);
}

async function listDir(p: string): Promise<string[]> {
  return readdir(p).catch(() => []);
}

describe("translation cache", () => {
  it("writes a translated text GGUF once, then reuses the verified entry", async () => {
    const store = await gemmaStore([1]);
    const cache = new TranslationCache({ dir: await temp() });
    const model = await store.resolve("gemma3:s1");

    const first = await prepareModel(model, { cache });
    expect(first).toMatchObject({ translated: true, cacheHit: false, architecture: "gemma3", embedding: false });
    expect(first.modelPath.startsWith(cache.dir)).toBe(true);
    // the entry is the translation: translating it again finds nothing to do
    expect(await translate(first.modelPath)).toBeNull();
    const mtime = (await stat(first.modelPath)).mtimeMs;

    const second = await prepareModel(model, { cache });
    expect(second).toMatchObject({ translated: true, cacheHit: true, modelPath: first.modelPath });
    expect((await stat(first.modelPath)).mtimeMs).toBe(mtime);
  });

  it("an embedded projector (a clip view) is cached as its own entry; a projector layer is used as it is or through its view", async () => {
    const fixtures = await temp();
    const vision = await generateFixtureFiles("gemma3", { seed: 12, layout: "ollama", variant: "4b-vision" }, fixtures);
    const native = await generateFixtureFiles("gemma3", { seed: 12, layout: "native", variant: "4b-vision" }, fixtures);
    const root = await temp();
    await buildOllamaStore(root, [{ name: "gemma3:s12", model: vision.text }]);
    const cache = new TranslationCache({ dir: await temp() });
    const model = await new ModelStore(root).resolve("gemma3:s12");
    const first = await prepareModel(model, { cache });
    expect(first.mmproj).toBe(join(cache.entryDir(cache.keyFor(model.modelDigest!, "mmproj")), "model.gguf"));
    expect(first.mmproj).not.toBe(first.modelPath);
    const mmproj = await readGguf(first.mmproj!);
    expect(mmproj.getString("general.architecture")).toBe("clip");
    await mmproj.close();
    const again = await prepareModel(model, { cache });
    expect(again.mmproj).toBe(first.mmproj);
    expect((await cache.entries()).map((e) => e.meta?.kind).sort()).toEqual(["mmproj", "text"]);

    // a projector layer that needs nothing (a native mmproj) is passed as it is
    const layerOk = await prepareModel({ ...model, projectors: [native.mmproj!] }, { cache });
    expect(layerOk.mmproj).toBe(native.mmproj);
    // one that needs translating is cached under the layer's own digest (an Ollama vision blob stands in for an old LLaVA projector)
    // and translated under the cache's profile, which is part of its key
    const layerBlob = model.modelPath;
    const reference = new TranslationCache({ dir: cache.dir, profile: "reference" });
    const layerView = await prepareModel({ ...model, projectors: [layerBlob] }, { cache: reference });
    expect(layerView.mmproj).toBe(join(reference.entryDir(reference.keyFor(`sha256:${layerBlob.split("sha256-")[1]}`, "mmproj")), "model.gguf"));
  });

  it("non-Ollama files and OLLAMA_LLAMA_CPP_COMPAT=0 pass the original path through, with no copy", async () => {
    const dir = await temp();
    const cache = new TranslationCache({ dir: join(dir, "cache") });
    const native = await generateFixtureFiles("gemma3", { seed: 1, layout: "native", variant: "1b" }, dir);
    const plain = await prepareModel(await new ModelStore(dir).resolve(native.text), { cache });
    expect(plain).toMatchObject({ translated: false, modelPath: native.text });

    const store = await gemmaStore([2]);
    const off = await prepareModel(await store.resolve("gemma3:s2"), { cache, env: { OLLAMA_LLAMA_CPP_COMPAT: "0" } });
    expect(off).toMatchObject({ translated: false, modelPath: (await store.resolve("gemma3:s2")).modelPath });
    expect(existsSync(cache.dir)).toBe(false);
  });

  it("a plain Ollama-format GGUF (not in a store) is keyed by its content digest", async () => {
    const dir = await temp();
    const fx = await generateFixtureFiles("gemma3", { seed: 3, layout: "ollama", variant: "1b" }, dir);
    const cache = new TranslationCache({ dir: join(dir, "cache") });
    const a = await prepareModel(await new ModelStore(dir).resolve(fx.text), { cache });
    expect(a.translated).toBe(true);
    const digest = await cache.fileDigest(fx.text);
    expect(a.modelPath).toBe(join(cache.entryDir(cache.keyFor(digest, "text")), "model.gguf"));
  });

  it("concurrent launches translate once (per-entry lock), the others reuse the entry", async () => {
    const store = await gemmaStore([4]);
    const dir = await temp();
    const model = await store.resolve("gemma3:s4");
    const results = await Promise.all(Array.from({ length: 8 }, () => prepareModel(model, { cache: new TranslationCache({ dir }) })));
    expect(results.map((r) => r.cacheHit).sort()).toEqual([false, ...Array<boolean>(7).fill(true)]);
    expect(new Set(results.map((r) => r.modelPath)).size).toBe(1);
    expect(await listDir(join(dir, "locks"))).toEqual([]);
    expect(await listDir(join(dir, "tmp"))).toEqual([]);
  });

  it("8 launches in separate processes: one translation, all succeed, the entry byte-identical to a single run's", async () => {
    const store = await gemmaStore([11]);
    const dir = await temp();
    const script = fileURLToPath(new URL("./prepare-child.ts", import.meta.url));
    const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
    // Hold the entry's lock (as a live writer would) until all eight are past their cache
    // lookup and waiting for it: then they race for it, whatever their start-up times.
    const lock = join(dir, "locks", `${new TranslationCache({ dir }).keyFor((await store.resolve("gemma3:s11")).modelDigest!, "text")}.lock`);
    await mkdir(join(dir, "locks"), { recursive: true });
    await writeFile(lock, `${process.pid} test`);
    let waiting = 0;
    const runs = Promise.all(
      Array.from(
        { length: 8 },
        () =>
          new Promise<{ hit: boolean; path: string }>((resolve, reject) => {
            const child = spawn(process.execPath, ["--import", tsx, script, store.root, "gemma3:s11", dir], { stdio: ["ignore", "pipe", "pipe"] });
            let out = "";
            let err = "";
            child.stdout.on("data", (d) => (out += d));
            child.stderr.on("data", (d) => {
              if (!err.includes("translating") && (err += d).includes("translating")) waiting++;
            });
            child.on("close", (code) => (code === 0 ? resolve(JSON.parse(out) as { hit: boolean; path: string }) : reject(new Error(`exit ${code}: ${err}`))));
          }),
      ),
    );
    while (waiting < 8) await new Promise((r) => setTimeout(r, 50));
    await rm(lock);
    const done = await runs;
    expect(done).toHaveLength(8);
    expect(done.filter((r) => !r.hit)).toHaveLength(1);
    expect(new Set(done.map((r) => r.path)).size).toBe(1);
    expect(await listDir(join(dir, "locks"))).toEqual([]);
    expect(await listDir(join(dir, "tmp"))).toEqual([]);
    expect(await listDir(join(dir, "entries"))).toHaveLength(1);
    // the same bytes as one launch alone into an empty cache
    const single = await prepareModel(await store.resolve("gemma3:s11"), { cache: new TranslationCache({ dir: await temp() }) });
    expect(single.cacheHit).toBe(false);
    expect((await readFile(done[0]!.path)).equals(await readFile(single.modelPath))).toBe(true);
  });

  it("an entry is verified before use: a damaged one is written again", async () => {
    const store = await gemmaStore([5]);
    const cache = new TranslationCache({ dir: await temp() });
    const model = await store.resolve("gemma3:s5");
    const first = await prepareModel(model, { cache });

    // flip a byte inside the header (a KV), keep the size
    const fh = await open(first.modelPath, "r+");
    await fh.write(Buffer.from([0x58]), 0, 1, 40);
    await fh.close();
    const again = await prepareModel(model, { cache });
    expect(again.cacheHit).toBe(false);
    expect(await translate(again.modelPath)).toBeNull();

    // truncated file
    await writeFile(again.modelPath, "GGUF");
    expect((await prepareModel(model, { cache })).cacheHit).toBe(false);
    const m = await readGguf(again.modelPath);
    expect(m.getString("general.architecture")).toBe("gemma3");
    await m.close();
  });

  it("evicts least-recently-used entries beyond the size limit", async () => {
    const store = await gemmaStore([6, 7, 8]);
    const dir = await temp();
    const probe = await prepareModel(await store.resolve("gemma3:s6"), { cache: new TranslationCache({ dir }) });
    const size = (await stat(probe.modelPath)).size;
    // room for two entries
    const cache = new TranslationCache({ dir, maxBytes: size * 2 + size / 2 });
    await new Promise((r) => setTimeout(r, 20));
    await prepareModel(await store.resolve("gemma3:s7"), { cache });
    await new Promise((r) => setTimeout(r, 20));
    // using s6 again makes s7 the least recently used
    expect((await prepareModel(await store.resolve("gemma3:s6"), { cache })).cacheHit).toBe(true);
    await new Promise((r) => setTimeout(r, 20));
    const s8 = await prepareModel(await store.resolve("gemma3:s8"), { cache });
    const left = (await cache.entries()).map((e) => e.meta?.source);
    expect(left).toHaveLength(2);
    expect(left).toContain((await store.resolve("gemma3:s6")).modelPath);
    expect(left).toContain((await store.resolve("gemma3:s8")).modelPath);
    expect(existsSync(s8.modelPath)).toBe(true);
  });

  it("a writer killed after its rename, before its unlock: the next launch (a cache hit) removes the dead lock, and the entry can be evicted again", async () => {
    const store = await gemmaStore([13, 14]);
    const dir = await temp();
    const s13 = await store.resolve("gemma3:s13");
    const first = await prepareModel(s13, { cache: new TranslationCache({ dir }) });
    // what a SIGKILLed writer leaves: its lock on the finished entry, a staging directory, a digest memo temp file
    const deadPid = await new Promise<number>((resolve) => {
      const c = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
      c.on("exit", () => resolve(c.pid!));
    });
    const key = new TranslationCache({ dir }).keyFor(s13.modelDigest!, "text");
    await writeFile(join(dir, "locks", `${key}.lock`), `${deadPid} 0123456789ab`);
    await mkdir(join(dir, "tmp", `.${key}.${deadPid}.00000000.tmp`), { recursive: true });
    await writeFile(join(dir, "tmp", `.${key}.${deadPid}.00000000.tmp`, `.model.gguf.${deadPid}.00000000.tmp`), "partial");
    await writeFile(join(dir, `digests.json.${deadPid}.tmp`), "{");
    // a live process's lock is left alone
    const liveKey = "f".repeat(40);
    await writeFile(join(dir, "locks", `${liveKey}.lock`), `${process.pid} 0123456789ab`);

    const hit = await prepareModel(s13, { cache: new TranslationCache({ dir }) });
    expect(hit.cacheHit).toBe(true);
    expect(await listDir(join(dir, "locks"))).toEqual([`${liveKey}.lock`]);
    expect(await listDir(join(dir, "tmp"))).toEqual([]);
    expect((await listDir(dir)).filter((n) => n.endsWith(".tmp"))).toEqual([]);

    // and the entry is evictable: a second model with room for one entry replaces it
    const size = (await stat(first.modelPath)).size;
    await new Promise((r) => setTimeout(r, 20));
    await prepareModel(await store.resolve("gemma3:s14"), { cache: new TranslationCache({ dir, maxBytes: size + size / 2 }) });
    expect(existsSync(first.modelPath)).toBe(false);
  });

  it("stopped mid-write (abort): typed error, no entry, no staging file, no lock left", async () => {
    const store = await gemmaStore([9]);
    const dir = await temp();
    const cache = new TranslationCache({ dir });
    const ac = new AbortController();
    const err = await prepareModel(await store.resolve("gemma3:s9"), {
      cache,
      signal: ac.signal,
      onProgress: () => ac.abort(),
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PrepareError);
    expect((err as PrepareError).code).toBe("TRANSLATION_ABORTED");
    expect(await listDir(join(dir, "entries"))).toEqual([]);
    expect(await listDir(join(dir, "tmp"))).toEqual([]);
    expect(await listDir(join(dir, "locks"))).toEqual([]);
  });

  it("a lock left by a dead process is taken over; a staging dir it left is swept", async () => {
    const store = await gemmaStore([10]);
    const dir = await temp();
    const cache = new TranslationCache({ dir, lockTimeoutMs: 5_000 });
    const model = await store.resolve("gemma3:s10");
    const key = cache.keyFor(model.modelDigest!, "text");
    await mkdir(join(dir, "locks"), { recursive: true });
    await mkdir(join(dir, "tmp", `.${key}.999999999.dead.tmp`), { recursive: true });
    await writeFile(join(dir, "locks", `${key}.lock`), "999999999 dead");
    const r = await prepareModel(model, { cache });
    expect(r.cacheHit).toBe(false);
    expect(await listDir(join(dir, "locks"))).toEqual([]);
    expect(await listDir(join(dir, "tmp"))).toEqual([]);
    expect(JSON.parse(await readFile(join(cache.entryDir(key), "entry.json"), "utf8"))).toMatchObject({ kind: "text", profile: "native" });
  });
});
