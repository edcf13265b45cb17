// A file whose general.architecture is a UINT32 instead of a STRING, through every entry
// point: each gives a typed error naming the file (and, for the typed access, where its KV
// starts), never an anonymous one. `inspect` is a viewer: it shows the value as it is.
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgufError, GgufValueType, parseGguf, readGguf, serializeGguf } from "@compat/gguf";
import { TRANSLATION_PROFILES, detectHandlers, translate, translateModel } from "@compat/handlers";
import { clipView, clipViewModel } from "@compat/clip";
import { prepareModel, TranslationCache } from "@compat/prepare";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { findLlamaTools, generateFixture } from "@compat/testkit";
import { bin, runToEnd, tsx, type Run } from "./helpers";

function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return runToEnd(spawn(process.execPath, ["--import", tsx, bin, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] }));
}

let dir: string;
let path: string;
let bytes: Uint8Array;
/** Where the general.architecture KV starts in the file. */
let keyAt: number;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-wrong-type-"));
  // an Ollama vision blob (text and tower in one file): both the text and the clip side look at it
  const m = generateFixture("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }).text;
  m.set("general.architecture", GgufValueType.UINT32, 7);
  bytes = (await serializeGguf(m)).slice();
  path = join(dir, "wrong-arch.gguf");
  await writeFile(path, bytes);
  const needle = Buffer.from("general.architecture");
  keyAt = Buffer.from(bytes).indexOf(needle) - 8;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function typedError(f: () => unknown): Promise<GgufError> {
  const e = await (async () => f())().then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(GgufError);
  return e as GgufError;
}

function namesFile(e: GgufError, source: string) {
  expect(e.code).toBe("KV_TYPE");
  expect(e.source).toBe(source);
  expect(e.offset).toBe(keyAt);
  expect(e.message).toContain(`${source} @ offset ${keyAt}: metadata key "general.architecture" has type UINT32 (expected STRING)`);
}

describe("general.architecture of the wrong type", () => {
  it("@compat/gguf: parse and read, then typed access", async () => {
    namesFile(await typedError(() => parseGguf(bytes, "mem.gguf").getString("general.architecture")), "mem.gguf");
    const model = await readGguf(path);
    try {
      namesFile(await typedError(() => model.getString("general.architecture")), path);
    } finally {
      await model.close();
    }
  });

  it("@compat/handlers: detect, translateModel (both profiles) and translate(path)", async () => {
    const model = await readGguf(path);
    try {
      namesFile(await typedError(() => detectHandlers(model)), path);
      for (const profile of TRANSLATION_PROFILES) namesFile(await typedError(() => translateModel(model, { profile })), path);
    } finally {
      await model.close();
    }
    namesFile(await typedError(() => translate(path)), path);
  });

  it("@compat/clip: clipView on a path and on a model, clipViewModel", async () => {
    namesFile(await typedError(() => clipView(path)), path);
    const model = await readGguf(path);
    try {
      namesFile(await typedError(() => clipView(model)), path);
      namesFile(await typedError(() => clipViewModel(model)), path);
    } finally {
      await model.close();
    }
  });

  it("@compat/prepare: prepareModel on a store blob names the blob", async () => {
    const root = join(dir, "store");
    await buildOllamaStore(root, [{ name: "wrong:1", model: path }]);
    const resolved = await new ModelStore(root).resolve("wrong:1");
    const e = await typedError(() => prepareModel(resolved, { cache: new TranslationCache({ dir: join(dir, "cache") }) }));
    namesFile(e, resolved.modelPath);
  });

  it("the CLI: detect, translate and serve fail in one line naming the file; inspect shows the value", async () => {
    const line = new RegExp(`^ollama-compat: KV_TYPE: ${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} @ offset ${keyAt}: metadata key "general.architecture" has type UINT32`);
    for (const args of [["detect", path], ["translate", path, "-o", join(dir, "out.gguf")], ["detect", path, "--json"]]) {
      const r = await cli(args);
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.stderr.trim().split("\n"), args.join(" ")).toHaveLength(1);
      if (!args.includes("--json")) expect(r.stderr, args.join(" ")).toMatch(line);
      else expect(r.stderr).toContain(path);
    }
    const root = join(dir, "store-cli");
    await buildOllamaStore(root, [{ name: "wrong:1", model: path }]);
    const blob = (await new ModelStore(root).resolve("wrong:1")).modelPath;
    const s = await cli(["serve", "wrong:1", "--models", root, "--cache-dir", join(dir, "cache-cli"), "--llama-server", (await findLlamaTools()).server]);
    expect(s.code).toBe(1);
    expect(s.stderr).toContain(`KV_TYPE: ${blob} @ offset ${keyAt}`);
    const i = await cli(["inspect", path]);
    expect(i.code).toBe(0);
    expect(i.stdout).toMatch(/general\.architecture: UINT32 = 7/);
  }, 120_000);
});
