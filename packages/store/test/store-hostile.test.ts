import { appendFile, mkdir, open, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { buildOllamaStore, isPathLike, MediaType, ModelStore, StoreError } from "@compat/store";
import { tempDirs } from "./helpers";

// The store is untrusted input: it is shared with a running Ollama and filled from the network.
const temp = tempDirs();

async function errorOf(p: Promise<unknown>): Promise<StoreError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(StoreError);
  return e as StoreError;
}

async function store(): Promise<{ root: string; blob: string; manifest: string; template: string }> {
  const root = await temp();
  const fx = await generateFixtureFiles("llama", { seed: 1, layout: "ollama" }, await temp());
  const [built] = await buildOllamaStore(root, [{ name: "tiny:1b", model: fx.text, template: "{{ .Prompt }}", params: { num_ctx: 512 } }]);
  return {
    root,
    blob: built!.blob(MediaType.model),
    manifest: join(root, "manifests", "registry.ollama.ai", "library", "tiny", "1b"),
    template: built!.blob(MediaType.template),
  };
}

/** Sets the manifest's size of the layer of `mediaType` (so that a planted file passes the size check and is really read). */
async function setLayerSize(manifest: string, mediaType: string, size: number): Promise<void> {
  const m = JSON.parse(await readFile(manifest, "utf8"));
  for (const l of m.layers) if (l.mediaType === mediaType) l.size = size;
  await writeFile(manifest, JSON.stringify(m));
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

  it("a template blob of 600 MiB is refused before it is read (a sparse file; the limit holds whatever the manifest says)", async () => {
    const { root, manifest, template } = await store();
    await rm(template);
    const fh = await open(template, "w");
    await fh.truncate(600 * 2 ** 20);
    await fh.close();
    await setLayerSize(manifest, MediaType.template, 600 * 2 ** 20);
    const e = await errorOf(new ModelStore(root).resolve("tiny:1b"));
    expect(e.code).toBe("UNSAFE_BLOB");
    expect(e.message).toMatch(/is 629145600 bytes \(expected at most 4194304\)/);
  });

  it("a layer or manifest whose size on disk says 0 and that streams without end (/proc/self/pagemap) is read no further than the limit", async () => {
    const { root, manifest, template } = await store();
    await rm(template);
    await symlink("/proc/self/pagemap", template);
    await setLayerSize(manifest, MediaType.template, 0);
    // a blob symlinked out of the store is refused as such; inside the store, the same stream
    let e = await errorOf(new ModelStore(root).resolve("tiny:1b"));
    expect(e.code).toBe("UNSAFE_BLOB");
    await rm(manifest);
    await symlink("/proc/self/pagemap", manifest);
    e = await errorOf(new ModelStore(root).resolve("tiny:1b"));
    expect(e.code).toBe("CORRUPT_MANIFEST");
    expect(e.message).toMatch(/holds more than 1048576 bytes/);
  });

  it("a manifest symlinked to /dev/zero is refused as a device before it is read, and is one line of list()", async () => {
    const { root, manifest } = await store();
    const other = join(root, "manifests", "registry.ollama.ai", "library", "zero", "latest");
    await mkdir(join(other, ".."), { recursive: true });
    await symlink("/dev/zero", other);
    const e = await errorOf(new ModelStore(root).resolve("zero"));
    expect(e.code).toBe("CORRUPT_MANIFEST");
    expect(e.message).toContain("is a character device, not a manifest");
    const listed = await new ModelStore(root).list();
    expect(listed.map((l) => [l.name, l.error?.code])).toEqual([
      ["tiny:1b", undefined],
      ["zero:latest", "CORRUPT_MANIFEST"],
    ]);
    void manifest;
  });

  it("a model blob that is a directory (or any non-regular file) is refused before anyone opens it", async () => {
    const { root, blob } = await store();
    await rm(blob);
    await mkdir(blob);
    const e = await errorOf(new ModelStore(root).resolve("tiny:1b"));
    expect(e.code).toBe("UNSAFE_BLOB");
    expect(e.message).toContain("is a directory, not a regular file");
  });

  it("a manifest that is not JSON: its bytes are not quoted in the error (escapes, another file's content)", async () => {
    const { root, manifest } = await store();
    await writeFile(manifest, "\x1b[2J\x1b]0;pwned\x07 secret-content {");
    const e = await errorOf(new ModelStore(root).resolve("tiny:1b"));
    expect(e.code).toBe("CORRUPT_MANIFEST");
    expect(e.message).not.toContain("secret");
    expect(e.message).not.toMatch(/[\x00-\x1f]/);
  });
});

describe("one rule for FILE-or-MODEL arguments", () => {
  it("a bare word is a model name even when a folder or file of that name is here; a path-like one is a file when it exists", async () => {
    const { root } = await store();
    const cwd = process.cwd();
    const here = await temp();
    process.chdir(here);
    try {
      await mkdir("tiny");
      await writeFile("tiny:1b", "not a model");
      expect((await new ModelStore(root).resolve("tiny:1b")).kind).toBe("store");
      // path-like and present: the file, and a folder there is not a GGUF
      const dirErr = await errorOf(new ModelStore(root).resolve("./tiny"));
      expect(dirErr.code).toBe("INVALID_REFERENCE");
      expect(dirErr.message).toContain("is a directory, not a GGUF file");
      expect((await new ModelStore(root).resolve("./tiny:1b")).kind).toBe("file");
      // a bare word that is no model, with a file of that name here: the error says how to mean the file
      await writeFile("other", "x");
      const unknown = await errorOf(new ModelStore(root).resolve("other"));
      expect(unknown.code).toBe("UNKNOWN_MODEL");
      expect(unknown.message).toContain('write ./other');
    } finally {
      process.chdir(cwd);
    }
    for (const ref of ["gemma3", "gemma3:4b", "ns/model:tag", "x.gguf:latest"]) expect(isPathLike(ref), ref).toBe(/\//.test(ref));
    for (const ref of ["./gemma3", "/abs/path", "model.gguf", "MODEL.GGUF", "dir\\file"]) expect(isPathLike(ref), ref).toBe(true);
  });
});
