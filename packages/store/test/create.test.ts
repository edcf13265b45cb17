/**
 * createModel and receiveBlob on a store on disk: what a replaced version leaves, the refusals
 * a create or an upload ends with (nothing left behind), and Go's JSON encoding as a round trip.
 */
import { createHash, randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { symlinkSync } from "node:fs";
import { readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { buildOllamaStore, createModel, goJson, MediaType, parseModelName, receiveBlob, removeUnreferenced, STAGING_DIR, type ModelName } from "@compat/store";
import { tempDirs } from "./helpers";

const temp = tempDirs();
const name = (s: string): ModelName => parseModelName(s)!;
const sha = (b: Uint8Array) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

async function store(): Promise<string> {
  const root = await temp();
  // a GGUF header only: the model layer is read for its architecture and size, never loaded here
  const gguf = Buffer.alloc(24);
  gguf.write("GGUF", 0, "latin1");
  gguf.writeUInt32LE(3, 4);
  await buildOllamaStore(root, [{ name: "base", model: new Uint8Array(gguf), system: "old system", params: { num_ctx: 512, stop: ["a"] } }]);
  return root;
}

async function staged(root: string): Promise<string[]> {
  return readdir(join(root, "blobs", STAGING_DIR)).catch(() => []);
}

describe("createModel", () => {
  it("over its own name: the replaced layers go, unless a running server still reads them (keep); then they go later", async () => {
    const root = await store();
    const before = JSON.parse(await readFile(join(root, "manifests", "registry.ollama.ai", "library", "base", "latest"), "utf8")) as { layers: Array<{ mediaType: string; digest: string }> };
    const oldSystem = before.layers.find((l) => l.mediaType === MediaType.system)!.digest;
    const held: string[] = [];
    const made = await createModel(root, { name: name("base"), from: name("base"), system: "new system", parameters: { stop: ["b"] } }, { keep: (d) => d === oldSystem && held.push(d) > 0 });
    expect(held).toEqual([oldSystem]);
    expect(made.removed).not.toContain(oldSystem);
    expect(await readdir(join(root, "blobs"))).toContain(oldSystem.replace(":", "-"));
    expect(await removeUnreferenced(root, [oldSystem])).toEqual([oldSystem]);
    const params = JSON.parse(await readFile(join(root, "manifests", "registry.ollama.ai", "library", "base", "latest"), "utf8")) as { layers: Array<{ mediaType: string; digest: string }> };
    const paramsBlob = params.layers.find((l) => l.mediaType === MediaType.params)!.digest.replace(":", "-");
    expect(await readFile(join(root, "blobs", paramsBlob), "utf8")).toBe('{"num_ctx":512,"stop":["b"]}\n');
  });

  it("refusals name what is wrong and write nothing: an adapter blob not in the store, two adapters, a source not installed", async () => {
    const root = await store();
    const manifests = async () => readdir(join(root, "manifests", "registry.ollama.ai", "library"));
    const missing = `sha256:${"0".repeat(64)}`;
    await expect(createModel(root, { name: name("x"), from: name("base"), adapters: { "a.gguf": missing } })).rejects.toMatchObject({ code: "INVALID_CREATE", message: expect.stringContaining(`POST /api/blobs/${missing}`) });
    await expect(createModel(root, { name: name("x"), from: name("base"), adapters: { "a.gguf": missing, "b.gguf": missing } })).rejects.toMatchObject({ code: "INVALID_CREATE", message: "only one adapter is currently supported" });
    await expect(createModel(root, { name: name("x"), from: name("nope") })).rejects.toMatchObject({ code: "UNKNOWN_MODEL" });
    expect(await manifests()).toEqual(["base"]);
  });
});

describe("createModel on a hostile store", () => {
  it("a FIFO or a link to /dev/zero where the source's params or model blob should be: refused, nothing opened for ever, nothing written", async () => {
    for (const [mediaType, make] of [
      [MediaType.params, (p: string) => execFileSync("mkfifo", [p])],
      [MediaType.model, (p: string) => execFileSync("mkfifo", [p])],
      [MediaType.params, (p: string) => symlinkSync("/dev/zero", p)],
    ] as const) {
      const root = await store();
      const m = JSON.parse(await readFile(join(root, "manifests", "registry.ollama.ai", "library", "base", "latest"), "utf8")) as { layers: Array<{ mediaType: string; digest: string }> };
      const blob = join(root, "blobs", m.layers.find((l) => l.mediaType === mediaType)!.digest.replace(":", "-"));
      await rm(blob);
      make(blob);
      await expect(createModel(root, { name: name("x"), from: name("base"), system: "s" })).rejects.toMatchObject({ code: "UNSAFE_BLOB", message: expect.stringContaining("not a regular file") });
      expect(await readdir(join(root, "manifests", "registry.ollama.ai", "library"))).toEqual(["base"]);
    }
  });
});

describe("receiveBlob", () => {
  it("stores a body under its digest only when it matches; a mismatch, an oversize or a broken body leaves nothing", async () => {
    const root = await store();
    const bytes = randomBytes(300_000);
    const chunks = async function* (b: Uint8Array, failAt?: number) {
      for (let i = 0; i < b.length; i += 65536) {
        if (failAt !== undefined && i >= failAt) throw new Error("the client went away");
        yield b.subarray(i, i + 65536);
      }
    };
    await expect(receiveBlob(root, sha(randomBytes(8)), chunks(bytes), 1 << 20)).rejects.toMatchObject({ code: "DIGEST_MISMATCH" });
    await expect(receiveBlob(root, sha(bytes), chunks(bytes), 1000)).rejects.toMatchObject({ code: "INVALID_CREATE" });
    await expect(receiveBlob(root, sha(bytes), chunks(bytes, 131072), 1 << 20)).rejects.toThrow("the client went away");
    expect(await staged(root)).toEqual([]);
    expect(await readdir(join(root, "blobs"))).not.toContain(sha(bytes).replace(":", "-"));
    expect(await receiveBlob(root, sha(bytes), chunks(bytes), 1 << 20)).toBe(true);
    expect(await receiveBlob(root, sha(bytes), chunks(bytes), 1 << 20)).toBe(false);
    expect(sha(await readFile(join(root, "blobs", sha(bytes).replace(":", "-"))))).toBe(sha(bytes));
  });
});

describe("goJson", () => {
  it("round-trips any JSON value, with no raw <, > or & (Go's json.Encoder escapes them) and one newline at the end", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (v) => {
        const text = goJson(v);
        expect(text.endsWith("\n")).toBe(true);
        expect(/[<>&\u2028\u2029]/.test(text)).toBe(false);
        expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify(v)));
      }),
    );
  });
});
