import { appendFile, mkdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { BridgeError, buildOllamaStore, MediaType, ModelStore } from "@compat/server-bridge";
import { tempDirs } from "./helpers";

// The store is untrusted input: it is shared with a running Ollama and filled from the network.
const temp = tempDirs();

async function errorOf(p: Promise<unknown>): Promise<BridgeError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(BridgeError);
  return e as BridgeError;
}

async function store(): Promise<{ root: string; blob: string; manifest: string }> {
  const root = await temp();
  const fx = await generateFixtureFiles("llama", { seed: 1, layout: "ollama" }, await temp());
  const [built] = await buildOllamaStore(root, [{ name: "tiny:1b", model: fx.text }]);
  return { root, blob: built!.blob(MediaType.model), manifest: join(root, "manifests", "registry.ollama.ai", "library", "tiny", "1b") };
}

describe("a hostile or damaged Ollama store", () => {
  it("a manifest digest that tries to leave blobs/ is not a sha256 digest", async () => {
    const { root, manifest } = await store();
    const m = JSON.parse(await readFile(manifest, "utf8"));
    m.layers[0].digest = "sha256:../../../../etc/passwd";
    await writeFile(manifest, JSON.stringify(m));
    const e = await errorOf(new ModelStore(root).resolve("tiny:1b"));
    expect(e.code).toBe("CORRUPT_MANIFEST");
    expect(e.message).toContain(manifest);
  });

  it("a blob symlinked out of the store is refused; one symlinked inside it is fine", async () => {
    const { root, blob } = await store();
    const outside = join(await temp(), "elsewhere.gguf");
    await writeFile(outside, await readFile(blob));
    await rm(blob);
    await symlink(outside, blob);
    const e = await errorOf(new ModelStore(root).resolve("tiny:1b"));
    expect(e.code).toBe("UNSAFE_BLOB");
    expect(e.message).toContain(outside);

    const inside = join(root, "blobs", "copy-of-model");
    await writeFile(inside, await readFile(outside));
    await rm(blob);
    await symlink(inside, blob);
    expect((await new ModelStore(root).resolve("tiny:1b")).modelPath).toBe(blob);
  });

  it("a manifest of gigabytes is refused before it is read", async () => {
    const { root, manifest } = await store();
    await appendFile(manifest, Buffer.alloc(2 << 20, 0x20));
    const e = await errorOf(new ModelStore(root).resolve("tiny:1b"));
    expect(e.code).toBe("CORRUPT_MANIFEST");
    expect(e.message).toMatch(/not a manifest/);
  });

  it.each(["../../no/such/manifest:tag", "a/b/c/d/e", "gem\u0007ma", "ns/..:latest", "tiny:1b\n", "host/ns/m:../../x"])("refuses the reference %j", async (ref) => {
    const { root } = await store();
    await mkdir(join(root, "manifests"), { recursive: true });
    expect((await errorOf(new ModelStore(root).resolve(ref))).code).toBe("INVALID_REFERENCE");
  });

  it("verifyDigest: a blob whose bytes do not hash to its name is refused", async () => {
    const { root, blob } = await store();
    expect((await new ModelStore(root, {}, { verifyDigest: true }).resolve("tiny:1b")).modelPath).toBe(blob);
    const bytes = await readFile(blob);
    bytes[bytes.length - 1]! ^= 0xff;
    await writeFile(blob, bytes);
    // without verification only the size is checked
    expect((await new ModelStore(root).resolve("tiny:1b")).modelPath).toBe(blob);
    const e = await errorOf(new ModelStore(root, {}, { verifyDigest: true }).resolve("tiny:1b"));
    expect(e.code).toBe("DIGEST_MISMATCH");
  });
});
