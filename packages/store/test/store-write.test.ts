// store-write.ts and the rollback names of migrate: properties over random names and bytes,
// with writers racing for the same blob and the same manifest.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addBlobBytes, copyModel, deleteModel, isRollbackName, manifestPathIn, removeUnreferenced, parseModelName, rollbackName, rolledBackName, writeManifest, STAGING_DIR } from "../src/index";
import { isValidName } from "../src/name";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-store-write-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const part = (first: string, rest: string, max: number) =>
  fc.tuple(fc.constantFrom(...first), fc.array(fc.constantFrom(...rest), { maxLength: max - 1 })).map(([a, b]) => a + b.join(""));
const ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
const modelName = fc.record({
  host: part(ALNUM, ALNUM + ".-:", 40),
  namespace: part(ALNUM, ALNUM + "-", 20),
  model: part(ALNUM, ALNUM + ".-", 20),
  tag: part(ALNUM, ALNUM + ".-", 20),
});

describe("rollback names", () => {
  it("are valid Ollama names, marked as records, and lead back to the model", () => {
    fc.assert(
      fc.property(modelName, (n) => {
        fc.pre(isValidName(n) && !isRollbackName(n));
        const r = rollbackName(n)!;
        expect(isValidName(r)).toBe(true);
        expect(isRollbackName(r)).toBe(true);
        expect(rolledBackName(r)).toEqual(n);
      }),
    );
  });

  it("is null when the host would grow past Ollama's 350 characters", () => {
    expect(rollbackName({ host: "h".repeat(340), namespace: "library", model: "m", tag: "latest" })).toBeNull();
    expect(isRollbackName(parseModelName("ollama-compat-undo.registry.ollama.ai/library/gemma3:4b")!)).toBe(true);
  });
});

describe("addBlob and writeManifest", () => {
  it("racing writers: every blob is its bytes under its sha256, nothing else is left in blobs/ or staged", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.uint8Array({ maxLength: 4096 }), { minLength: 1, maxLength: 8 }), async (contents) => {
        const root = await mkdtemp(join(dir, "store-"));
        // each content written twice at once: one of the two finds the other's blob
        const written = await Promise.all([...contents, ...contents].map((c) => addBlobBytes(root, c)));
        for (const [i, w] of written.entries()) {
          const bytes = [...contents, ...contents][i]!;
          expect(w.digest).toBe(`sha256:${createHash("sha256").update(bytes).digest("hex")}`);
          expect(Buffer.compare(await readFile(w.path), Buffer.from(bytes))).toBe(0);
        }
        const names = await readdir(join(root, "blobs"));
        expect(names.filter((n) => n !== STAGING_DIR).every((n) => /^sha256-[0-9a-f]{64}$/.test(n))).toBe(true);
        expect(await readdir(join(root, "blobs", STAGING_DIR))).toEqual([]);
        await rm(root, { recursive: true });
      }),
      { numRuns: 20 },
    );
  });

  it("racing manifest writers: the manifest is one of them whole, and no temp file sits where Ollama reads manifests", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.string({ minLength: 1, maxLength: 200 }), { minLength: 1, maxLength: 6 }), async (texts) => {
        const root = await mkdtemp(join(dir, "store-"));
        const path = join(root, "manifests", "registry.ollama.ai", "library", "m", "latest");
        await Promise.all(texts.map((t) => writeManifest(root, path, t)));
        expect(texts).toContain(await readFile(path, "utf8"));
        expect(await readdir(join(root, "manifests", "registry.ollama.ai", "library", "m"))).toEqual(["latest"]);
        expect(await readdir(join(root, "manifests", STAGING_DIR))).toEqual([]);
        await rm(root, { recursive: true });
      }),
      { numRuns: 20 },
    );
  });
});

describe("copy and delete on an untrusted store", () => {
  it("a FIFO where a manifest should be: copy and delete refuse it at once (CORRUPT_MANIFEST), and no other model's blobs are removed", async () => {
    const root = join(dir, "fifo-store");
    const victim = parseModelName("victim:latest")!;
    const victimPath = manifestPathIn(root, victim);
    await mkdir(dirname(victimPath), { recursive: true });
    execFileSync("mkfifo", [victimPath]);
    // a second model whose blob a careless delete would take for unreferenced
    const { digest: blob } = await addBlobBytes(root, new TextEncoder().encode("kept"));
    const other = parseModelName("other:latest")!;
    await writeManifest(root, manifestPathIn(root, other), new TextEncoder().encode(JSON.stringify({ schemaVersion: 2, layers: [{ mediaType: "application/vnd.ollama.image.model", digest: blob, size: 4 }] })));
    // readFile would block on the FIFO's open for ever; these must answer
    await expect(copyModel(root, victim, parseModelName("copy:latest")!)).rejects.toMatchObject({ code: "CORRUPT_MANIFEST" });
    await expect(deleteModel(root, victim)).rejects.toMatchObject({ code: "CORRUPT_MANIFEST" });
    // a store with an unreadable manifest keeps every blob
    expect(await removeUnreferenced(root, [blob])).toEqual([]);
  });
});
