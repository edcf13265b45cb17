// openViews against real fixtures: the status and both views every command and the bridge take.
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readGguf, writeGguf } from "@compat/gguf";
import { allFixtureVariants, findLlamaTools, generateFixture, generateFixtureFiles, generateFixtureSpecs, toGgufModel } from "@compat/testkit";
import { openViews, projectorOf } from "@compat/views";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LLAMA_CPP_ARCHS } from "../src/llama-archs";

let dir: string;
let vision: string;
let visionNative: { text: string; mmproj?: string };
let unknownArch: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-views-"));
  vision = (await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }, dir)).text;
  visionNative = await generateFixtureFiles("gemma3", { seed: 1, layout: "native", variant: "4b-vision" }, dir);
  // An Ollama-written file of an architecture no handler knows: the gemma3 1b fixture with its
  // arch renamed to "gemma9" ("gemma9." keys sort exactly where "gemma3." ones did).
  const spec = generateFixtureSpecs("gemma3", { seed: 4, layout: "ollama", variant: "1b" }).text;
  spec.kvs.splice(0, spec.kvs.length, ...spec.kvs.map((kv) => (kv.key === "general.architecture" ? { ...kv, value: "gemma9" } : kv.key.startsWith("gemma3.") ? { ...kv, key: `gemma9.${kv.key.slice("gemma3.".length)}` } : kv)));
  unknownArch = join(dir, "gemma9-ollama.gguf");
  await writeGguf(toGgufModel(spec), unknownArch);
}, 300_000);
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("openViews", () => {
  it("an Ollama vision blob: supported, the text view and the clip view of its own tower", async () => {
    const v = await openViews(vision);
    try {
      expect(v.status).toBe("supported");
      expect(v.architecture).toBe("gemma3");
      expect(v.text?.report.handlers.map((h) => h.name)).toEqual(["gemma3"]);
      expect(v.mmproj?.kind).toBe("view");
      if (v.mmproj?.kind !== "view") return;
      expect(v.mmproj.path).toBe(vision);
      expect(v.mmproj.view.model.getString("general.architecture")).toBe("clip");
      expect(v.ollamaWriter).toEqual(expect.arrayContaining(["KVs in byte-wise key order"]));
      // both views read the one parsed file, and each reads its own bytes
      expect((await v.text!.read(0, 4)).length).toBe(4);
      expect((await v.mmproj.view.read(v.mmproj.view.size - 8, 8)).length).toBe(8);
    } finally {
      await v.close();
    }
  });

  it("native files are a no-op: status native, no views; the file is not Ollama-written", async () => {
    for (const file of [visionNative.text, visionNative.mmproj!]) {
      const v = await openViews(file);
      expect([v.status, v.text, v.mmproj, v.ollamaWriter]).toEqual(["native", null, null, null]);
      await v.close();
    }
  });

  it("OLLAMA_LLAMA_CPP_COMPAT=0: disabled, no views", async () => {
    const v = await openViews(vision, { env: { OLLAMA_LLAMA_CPP_COMPAT: "0" } });
    expect([v.status, v.text, v.mmproj]).toEqual(["disabled", null, null]);
    await v.close();
  });

  it("an Ollama file of an architecture neither a handler nor llama.cpp knows: not-supported, with the writer's traces", async () => {
    const v = await openViews(unknownArch);
    expect([v.status, v.architecture, v.text, v.mmproj]).toEqual(["not-supported", "gemma9", null, null]);
    expect(v.ollamaWriter).toEqual(expect.arrayContaining([expect.stringMatching(/^tensors sorted by \(block, name\)/)]));
    await v.close();
  });

  it("takes a parsed model too, and owns it: close() closes it", async () => {
    const model = await readGguf(vision);
    const v = await openViews(model, { profile: "reference" });
    expect(v.model).toBe(model);
    expect(v.text?.report.profile).toBe("reference");
    await v.close();
    await expect(model.tensors[0]!.data.kind === "range" ? model.tensors[0]!.data.source.read(0, 1) : Promise.resolve()).rejects.toThrow();
  });

  it("a projector file takes the place of an embedded tower: a native one as it is, one that needs translating as its view", async () => {
    const asIs = await openViews(vision, { projectors: [visionNative.mmproj!] });
    expect(asIs.mmproj).toEqual({ kind: "file", path: visionNative.mmproj });
    expect(asIs.text).not.toBeNull();
    await asIs.close();
    // any Ollama vision blob stands in for a projector that needs translating
    const translated = await openViews(visionNative.text, { projectors: [vision] });
    expect(translated.status).toBe("supported");
    expect(translated.text).toBeNull();
    expect(translated.mmproj?.kind === "view" && translated.mmproj.path).toBe(vision);
    await translated.close();
    // with translation off, the projector file is still the one llama.cpp gets
    expect(await projectorOf(vision, { env: { OLLAMA_LLAMA_CPP_COMPAT: "0" } })).toEqual({ kind: "file", path: vision });
  });
});

describe("Ollama's writer traces", () => {
  it("every fixture in Ollama's layout carries them and none in llama.cpp's does (the kit models the writer on its own)", async () => {
    for (const { arch, variant } of allFixtureVariants()) {
      for (const layout of ["ollama", "native"] as const) {
        const f = generateFixture(arch, { seed: 1, layout, variant });
        const v = await openViews(f.text);
        expect(v.ollamaWriter !== null, `${arch}/${variant} ${layout}`).toBe(layout === "ollama");
        await v.close();
      }
    }
  }, 300_000);
});

describe("the llama.cpp architecture list", () => {
  it("is the built llama.cpp's own (src/llama-arch.cpp)", async () => {
    const tools = await findLlamaTools();
    const source = readFileSync(join(tools.binDir, "..", "src", "src", "llama-arch.cpp"), "utf8");
    const table = source.slice(source.indexOf("LLM_ARCH_NAMES = {"), source.indexOf("};", source.indexOf("LLM_ARCH_NAMES = {")));
    const names = [...table.matchAll(/"([^"]+)"/g)].map((m) => m[1]!).filter((n) => n !== "clip" && n !== "(unknown)");
    expect([...LLAMA_CPP_ARCHS].sort()).toEqual(names.sort());
  });
});
