/**
 * pullModel against a real OCI registry (Debian's docker-registry, seeded through its upload
 * API): the store it leaves is the one `ollama pull` leaves, a corrupted layer keeps nothing,
 * an aborted pull continues from what it flushed.
 */
import { randomBytes } from "node:crypto";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateFixtureFiles, startOciRegistry, type OciRegistry } from "@compat/testkit";
import { MediaType, ModelStore, parseChallenge, pullModel, RegistryError, STAGING_DIR, StoreError, type PullProgress } from "@compat/store";
import { tempDirs } from "./helpers";

const temp = tempDirs();
let registry: OciRegistry;
beforeAll(async () => {
  registry = await startOciRegistry();
}, 120_000);
afterAll(async () => {
  await registry?.stop();
});

/** Every name in blobs/ and manifests/ that is not a final blob or a manifest: what a pull must never leave. */
async function leftovers(root: string): Promise<string[]> {
  const blobs = await readdir(join(root, "blobs")).catch(() => [] as string[]);
  // the shared writer's staging folder (store-write.ts) may stay, empty
  const staged = await readdir(join(root, "blobs", STAGING_DIR)).catch(() => [] as string[]);
  return [...blobs.filter((n) => !/^sha256-[0-9a-f]{64}$/.test(n) && n !== STAGING_DIR), ...staged];
}

async function errorOf(p: Promise<unknown>): Promise<Error & { code: string }> {
  try {
    await p;
  } catch (e) {
    return e as Error & { code: string };
  }
  throw new Error("expected the pull to fail");
}

describe("pullModel (real registry)", () => {
  it("pulls a model into the store as ollama pull lays it out: every blob, then the manifest's exact bytes; ModelStore resolves it", async () => {
    const fx = await generateFixtureFiles("gemma3", { seed: 3, layout: "ollama", variant: "1b" }, await temp());
    const pushed = await registry.pushModel({ name: "library/gemma3:1b", model: fx.text, template: "{{ .Prompt }}", params: { num_ctx: 512, stop: ["<end_of_turn>"] } });
    const root = await temp();
    const events: PullProgress[] = [];
    // parts of 64 KiB: the model layer comes in many ranges, 16 at a time
    const pulled = await pullModel(pushed.ref, { root, insecure: true, minPartBytes: 64 << 10, onProgress: (p) => events.push(p) });
    expect(pulled.manifestPath).toBe(join(root, "manifests", registry.host, "library", "gemma3", "1b"));
    expect(Buffer.compare(await readFile(pulled.manifestPath), Buffer.from(pushed.manifest))).toBe(0);
    const model = await new ModelStore(root, {}, { verifyDigest: true }).resolve(pushed.ref);
    expect(Buffer.compare(await readFile(model.modelPath), await readFile(fx.text))).toBe(0);
    expect(model.template).toBe("{{ .Prompt }}");
    expect(model.params).toEqual({ num_ctx: 512, stop: ["<end_of_turn>"] });
    expect(await leftovers(root)).toEqual([]);
    // Ollama's progress objects: manifest first, the layer's bytes counted up to its size, success last
    expect(events[0]).toEqual({ status: "pulling manifest" });
    expect(events.at(-1)).toEqual({ status: "success" });
    const modelLayer = pushed.layers.find((l) => l.mediaType === MediaType.model)!;
    const mine = events.filter((e) => e.digest === modelLayer.digest);
    expect(mine.at(-1)).toEqual({ status: `pulling ${modelLayer.digest.slice(7, 19)}`, digest: modelLayer.digest, total: modelLayer.size, completed: modelLayer.size });
    for (let i = 1; i < mine.length; i++) expect(mine[i]!.completed).toBeGreaterThanOrEqual(mine[i - 1]!.completed!);
    // a second pull finds every blob in place and rewrites nothing but the manifest
    const again: PullProgress[] = [];
    await pullModel(pushed.ref, { root, insecure: true, onProgress: (p) => again.push(p) });
    expect(again.filter((e) => e.digest === modelLayer.digest)).toEqual([mine.at(-1)]);
  });

  it("a layer the registry serves with other bytes: DIGEST_MISMATCH naming the layer, nothing under a final name, no manifest, no leftovers", async () => {
    const good = randomBytes(3 << 20);
    const pushed = await registry.pushModel({ name: "library/corrupt:1", model: good, params: { num_ctx: 512 } });
    const layer = pushed.layers.find((l) => l.mediaType === MediaType.model)!;
    // same length, other bytes, under the same digest in the registry's storage
    const bad = Buffer.from(good);
    bad[bad.length >> 1]! ^= 0xff;
    await writeFile(registry.blobDataPath(layer.digest), bad);
    const root = await temp();
    const e = await errorOf(pullModel(pushed.ref, { root, insecure: true, minPartBytes: 256 << 10 }));
    expect(e).toBeInstanceOf(StoreError);
    expect(e.code).toBe("DIGEST_MISMATCH");
    expect(e.message).toContain(layer.digest);
    expect(e.message).toContain(MediaType.model);
    const blobs = await readdir(join(root, "blobs"));
    expect(blobs).not.toContain(`sha256-${layer.digest.slice(7)}`);
    expect(await leftovers(root)).toEqual([]);
    expect(await readdir(join(root, "manifests")).catch(() => [])).toEqual([]);
  });

  it("an aborted pull continues from what it flushed: the same bytes in the end, nothing left over", async () => {
    const bytes = randomBytes(24 << 20);
    const pushed = await registry.pushModel({ name: "library/resume:1", model: bytes });
    const root = await temp();
    const layer = pushed.layers[0]!;
    // abort as soon as some bytes have come, several times over
    let sawPartial = false;
    for (let i = 0; i < 3; i++) {
      const stop = new AbortController();
      let start: number | undefined;
      const e = await errorOf(
        pullModel(pushed.ref, {
          root,
          insecure: true,
          minPartBytes: 1 << 20,
          signal: stop.signal,
          onProgress: (p) => {
            if (p.digest !== layer.digest) return;
            start ??= p.completed;
            if (p.completed! > start!) stop.abort(new Error("stopped by the test"));
          },
        }),
      ).catch(() => undefined);
      if (e === undefined) break;
      const names = await readdir(join(root, "blobs"));
      sawPartial ||= names.some((n) => n.endsWith("-partial"));
      expect(names).not.toContain(`sha256-${layer.digest.slice(7)}`);
    }
    const resumed: PullProgress[] = [];
    await pullModel(pushed.ref, { root, insecure: true, minPartBytes: 1 << 20, onProgress: (p) => resumed.push(p) });
    const first = resumed.find((p) => p.digest === layer.digest)!;
    expect(sawPartial).toBe(true);
    expect(first.completed).toBeGreaterThan(0); // it started from what was there
    expect(Buffer.compare(await readFile(join(root, "blobs", `sha256-${layer.digest.slice(7)}`)), bytes)).toBe(0);
    expect(await leftovers(root)).toEqual([]);
  });

  it("two pulls of the same model at once: one downloads each blob, both succeed, the same bytes, nothing left over", async () => {
    const bytes = randomBytes(6 << 20);
    const pushed = await registry.pushModel({ name: "library/twice:1", model: bytes, params: { num_ctx: 512 } });
    const root = await temp();
    await Promise.all([0, 1].map(() => pullModel(pushed.ref, { root, insecure: true, minPartBytes: 256 << 10 })));
    expect(Buffer.compare(await readFile(join(root, "blobs", `sha256-${pushed.layers[0]!.digest.slice(7)}`)), bytes)).toBe(0);
    expect(await leftovers(root)).toEqual([]);
  });

  it("a newer version pulled under the same name: the old version's layers go, unless a manifest still names them or OLLAMA_NOPRUNE is set", async () => {
    const root = await temp();
    const v1 = await registry.pushModel({ name: "library/versions:1", model: randomBytes(2 << 20), params: { num_ctx: 512 } });
    await pullModel(v1.ref, { root, insecure: true });
    const v2 = await registry.pushModel({ name: "library/versions:1", model: randomBytes(2 << 20), params: { num_ctx: 512 } });
    await pullModel(v2.ref, { root, insecure: true });
    const names = await readdir(join(root, "blobs"));
    const file = (d: string) => `sha256-${d.slice(7)}`;
    expect(names).not.toContain(file(v1.layers[0]!.digest));
    expect(names).toContain(file(v2.layers[0]!.digest));
    expect(names).toContain(file(v1.layers[1]!.digest)); // the params layer, the same bytes in v2
    // OLLAMA_NOPRUNE: the replaced version's layers stay
    const v3 = await registry.pushModel({ name: "library/versions:1", model: randomBytes(1 << 20) });
    await pullModel(v3.ref, { root, insecure: true, env: { OLLAMA_NOPRUNE: "1" } });
    expect(await readdir(join(root, "blobs"))).toContain(file(v2.layers[0]!.digest));
  });

  it("no registry there: REGISTRY_UNREACHABLE in one line naming the host; an unknown tag: NOT_IN_REGISTRY", async () => {
    const port = await closedPort();
    const root = await temp();
    const e = await errorOf(pullModel(`127.0.0.1:${port}/library/x:1`, { root, insecure: true }));
    expect(e).toBeInstanceOf(RegistryError);
    expect(e.code).toBe("REGISTRY_UNREACHABLE");
    expect(e.message).toBe(`cannot reach 127.0.0.1:${port}: connection refused: nothing listens there (ECONNREFUSED)`);
    // a port fetch() refuses (the Fetch standard's bad ports, the list serve warns with): said so, and what to do
    const barred = await errorOf(pullModel("127.0.0.1:6000/library/x:1", { root, insecure: true }));
    expect(barred.code).toBe("REGISTRY_UNREACHABLE");
    expect(barred.message).toBe("cannot reach 127.0.0.1:6000: port 6000 is one of the ports fetch() refuses to connect to (the Fetch standard's bad ports), whatever listens there; put the registry on another port");
    const missing = await errorOf(pullModel(`${registry.host}/library/nothing:here`, { root, insecure: true }));
    expect(missing.code).toBe("NOT_IN_REGISTRY");
    const insecure = await errorOf(pullModel(`http://${registry.host}/library/nothing:here`, { root }));
    expect(insecure.code).toBe("INSECURE_PROTOCOL");
  });

  it("reads Bearer challenges, quoted commas included", () => {
    expect(parseChallenge('Bearer realm="https://registry.ollama.ai/v2/token",service="registry.ollama.ai",scope="repository:library/gemma3:pull"')).toEqual({
      realm: "https://registry.ollama.ai/v2/token",
      service: "registry.ollama.ai",
      scope: "repository:library/gemma3:pull",
    });
    expect(parseChallenge('Bearer realm="https://r.example/token",scope="repository:a/b:pull,push"')?.scope).toBe("repository:a/b:pull,push");
    expect(parseChallenge('Basic realm="x"')).toBeUndefined();
  });
});

/** A port nothing listens on (bound, then released). */
function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}
