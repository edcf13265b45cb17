import { readdir, readFile, rm, utimes, writeFile, copyFile, rename } from "node:fs/promises";
import { execFileSync } from "node:child_process";
import { mkdirSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { cachePreparer, FactsRecords, ServeMount, TranslationCache, type RecordedFacts } from "@compat/prepare";
import { tempDirs } from "./helpers";

const temp = tempDirs();

const FACTS: RecordedFacts = { status: "supported", handlers: ["gemma3"], architecture: "gemma3", embedding: false, hasChatTemplate: true, translated: true, mmproj: "view" };

/** A store of one Ollama-layout model and one native one. */
async function store(): Promise<ModelStore> {
  const src = await temp();
  const root = await temp();
  const ollama = await generateFixtureFiles("llama", { seed: 1, layout: "ollama" }, join(src, "o"));
  const native = await generateFixtureFiles("llama", { seed: 2, layout: "native" }, join(src, "n"));
  await buildOllamaStore(root, [
    { name: "llama3.2:1b", model: ollama.text },
    { name: "tiny:native", model: native.text },
  ]);
  return new ModelStore(root);
}

describe("FactsRecords: what serve remembers of a model's header", () => {
  it("a record is read back for the same blob, and ignored once the blob changed or was replaced (never stale facts)", async () => {
    const s = await store();
    const records = new FactsRecords(await temp());
    const m = await s.resolve("llama3.2:1b");
    await records.write(m, "native", await FactsRecords.versions(m), FACTS);
    expect(await records.read(m, "native")).toEqual(FACTS);
    // another profile is another record
    expect(await records.read(m, "reference")).toBeUndefined();
    // the blob's times changed (a write would change its ctime too): not this version any more
    await utimes(m.modelPath, new Date(), new Date(Date.now() - 60_000));
    expect(await records.read(m, "native")).toBeUndefined();
    await records.write(m, "native", await FactsRecords.versions(m), FACTS);
    expect(await records.read(m, "native")).toEqual(FACTS);
    // replaced by another file under the same name (same bytes, another inode)
    await copyFile(m.modelPath, `${m.modelPath}.new`);
    await rename(`${m.modelPath}.new`, m.modelPath);
    expect(await records.read(m, "native")).toBeUndefined();
  });

  it("a FIFO, a directory or an endless device where a record should be is no record, and never a hang", async () => {
    const s = await store();
    const dir = await temp();
    const records = new FactsRecords(dir);
    const m = await s.resolve("llama3.2:1b");
    await records.write(m, "native", await FactsRecords.versions(m), FACTS);
    const [file] = (await readdir(dir)).filter((f) => f.endsWith(".json"));
    const path = join(dir, file!);
    for (const put of [() => execFileSync("mkfifo", [path]), () => mkdirSync(path), () => symlinkSync("/dev/zero", path)]) {
      await rm(path, { recursive: true, force: true });
      put();
      expect(await records.read(m, "native")).toBeUndefined();
    }
  });

  it("a corrupt or foreign record is ignored, and serve's next prepare writes it again", async () => {
    const s = await store();
    const dir = await temp();
    const m = await s.resolve("tiny:native");
    const serve = () =>
      new ServeMount({ store: s, factsDir: dir, sidecarDir: join(dir, "sidecars"), rescanMs: 0, fallback: cachePreparer({ cache: new TranslationCache({ dir: join(dir, "cache") }) }) });
    const first = await serve().prepare(m);
    expect(first.modelPath).toBe(m.modelPath); // native: its blob, nothing mounted
    const [file] = (await readdir(dir)).filter((f) => f.endsWith(".json"));
    expect(file).toBeDefined();
    const good = await readFile(join(dir, file!), "utf8");
    const records = new FactsRecords(dir);
    expect(await records.read(m, "native")).toMatchObject({ translated: false, mmproj: "none", architecture: "llama" });
    for (const bad of ["{", "null", JSON.stringify({ ...JSON.parse(good), facts: { ...JSON.parse(good).facts, mmproj: "maybe" } }), JSON.stringify({ ...JSON.parse(good), v: 0 })]) {
      await writeFile(join(dir, file!), bad);
      expect(await records.read(m, "native"), bad).toBeUndefined();
      // parsed again, as on a first start, and recorded again
      expect(await serve().prepare(m)).toEqual(first);
      expect(JSON.parse(await readFile(join(dir, file!), "utf8"))).toEqual(JSON.parse(good));
    }
    await rm(join(dir, file!));
    expect(await serve().prepare(m)).toEqual(first);
    expect(await records.read(m, "native")).toBeDefined();
  });
});
