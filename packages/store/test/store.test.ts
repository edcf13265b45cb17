import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { buildOllamaStore, MediaType, ModelStore, parseModelName, StoreError } from "@compat/store";
import { tempDirs } from "./helpers";

const temp = tempDirs();

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(StoreError);
    return (e as StoreError).code;
  }
  throw new Error("expected a StoreError");
}

describe("Ollama model names", () => {
  it.each([
    ["gemma3", "registry.ollama.ai/library/gemma3:latest"],
    ["gemma3:4b", "registry.ollama.ai/library/gemma3:4b"],
    ["someone/model:q4", "registry.ollama.ai/someone/model:q4"],
    ["example.com:5000/team/model:v1.2", "example.com:5000/team/model:v1.2"],
    ["https://hf.co/org/model:Q8_0", "hf.co/org/model:Q8_0"],
  ])("%s -> %s", (ref, full) => {
    const n = parseModelName(ref)!;
    expect(`${n.host}/${n.namespace}/${n.model}:${n.tag}`).toBe(full);
  });

  it.each(["", "a/b/c/d", "gemma3:", "-bad", "name space", "ns.with.dot/model"])("rejects %j", (ref) => {
    expect(parseModelName(ref)).toBeNull();
  });
});

describe("ModelStore", () => {
  it("resolves every reference form through the manifests to the layers by media type", async () => {
    const root = await temp();
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "ollama" }, await temp());
    const built = await buildOllamaStore(root, [
      {
        name: "tiny:1b",
        model: fx.text,
        template: "{{ .Prompt }}",
        system: "be brief",
        params: { num_ctx: 1024, stop: ["<|eot_id|>"], temperature: 0.5 },
        adapters: [new Uint8Array([1, 2, 3])],
        projector: new Uint8Array([4, 5]),
      },
      { name: "tiny", model: fx.text },
      { name: "someone/tiny:q8", model: fx.text },
      { name: "example.com/team/tiny:v1", model: fx.text },
    ]);
    const store = new ModelStore(root);

    const m = await store.resolve("tiny:1b");
    expect(m).toMatchObject({ kind: "store", name: "tiny:1b", fullName: "registry.ollama.ai/library/tiny:1b" });
    expect(m.modelPath).toBe(built[0]!.blob(MediaType.model));
    expect(m.modelDigest).toBe(built[0]!.layers[0]!.digest);
    expect(m.template).toBe("{{ .Prompt }}");
    expect(m.system).toBe("be brief");
    expect(m.params).toEqual({ num_ctx: 1024, stop: ["<|eot_id|>"], temperature: 0.5 });
    expect(m.adapters).toEqual([built[0]!.blob(MediaType.adapter)]);
    expect(m.projectors).toEqual([built[0]!.blob(MediaType.projector)]);
    expect(m.config?.model_format).toBe("gguf");

    expect((await store.resolve("tiny")).name).toBe("tiny:latest");
    expect((await store.resolve("tiny:latest")).manifestPath).toBe(join(root, "manifests", "registry.ollama.ai", "library", "tiny", "latest"));
    expect((await store.resolve("someone/tiny:q8")).name).toBe("someone/tiny:q8");
    expect((await store.resolve("example.com/team/tiny:v1")).name).toBe("example.com/team/tiny:v1");

    expect((await store.list()).map((e) => e.name)).toEqual(["example.com/team/tiny:v1", "someone/tiny:q8", "tiny:1b", "tiny:latest"]);
  });

  it("takes a plain GGUF path as it is", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const m = await new ModelStore(await temp()).resolve(fx.text);
    expect(m).toMatchObject({ kind: "file", modelPath: fx.text });
    expect(m.modelDigest).toBeUndefined();
  });

  it("OLLAMA_MODELS picks the store", async () => {
    const root = await temp();
    await buildOllamaStore(root, [{ name: "x:1", model: new Uint8Array(8) }]);
    expect(new ModelStore(undefined, { OLLAMA_MODELS: root }).root).toBe(root);
  });

  it("faults are typed: unknown model, invalid reference, corrupt manifest, missing blob, no model layer", async () => {
    const root = await temp();
    const [good] = await buildOllamaStore(root, [{ name: "good:1", model: new Uint8Array(16), params: { num_ctx: 1 } }]);
    const store = new ModelStore(root);
    expect(await codeOf(store.resolve("nothere:1"))).toBe("UNKNOWN_MODEL");
    expect(await codeOf(store.resolve("not a name"))).toBe("INVALID_REFERENCE");
    expect(await codeOf(store.resolve("./missing.gguf"))).toBe("INVALID_REFERENCE");

    const manifest = JSON.parse(await readFile(good!.manifestPath, "utf8")) as { layers: Array<{ digest: string; mediaType: string; size: number }> };
    const corrupt = async (name: string, text: string) => {
      const p = join(root, "manifests", "registry.ollama.ai", "library", name, "1");
      await writeFile(p, text).catch(async () => {
        await (await import("node:fs/promises")).mkdir(join(p, ".."), { recursive: true });
        await writeFile(p, text);
      });
    };
    await corrupt("trunc", JSON.stringify(manifest).slice(0, 40));
    await corrupt("nolayers", JSON.stringify({ schemaVersion: 2 }));
    await corrupt("baddigest", JSON.stringify({ ...manifest, layers: [{ ...manifest.layers[0], digest: "sha256:xyz" }] }));
    await corrupt("nomodel", JSON.stringify({ ...manifest, layers: manifest.layers.filter((l) => l.mediaType !== MediaType.model) }));
    for (const n of ["trunc", "nolayers", "baddigest"]) expect(await codeOf(store.resolve(`${n}:1`))).toBe("CORRUPT_MANIFEST");
    expect(await codeOf(store.resolve("nomodel:1"))).toBe("NO_MODEL_LAYER");

    await rm(good!.blob(MediaType.params));
    const err = await store.resolve("good:1").catch((e: StoreError) => e);
    expect(err).toMatchObject({ code: "MISSING_BLOB" });
    expect((err as StoreError).message).toContain(good!.layers.find((l) => l.mediaType === MediaType.params)!.digest);

    // list() keeps going and reports each broken manifest with its error
    const listed = await store.list();
    expect(listed.find((e) => e.name === "good:1")?.error?.code).toBe("MISSING_BLOB");
    expect(listed.find((e) => e.name === "trunc:1")?.error?.code).toBe("CORRUPT_MANIFEST");
  });
});
