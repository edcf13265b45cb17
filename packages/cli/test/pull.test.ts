/**
 * `ollama-compat pull` against a real OCI registry (Debian's docker-registry, seeded through
 * its upload API): the pulled model is listed and served; killed with SIGKILL at random
 * moments and run again, it ends with the same bytes and nothing left over; failures are one line.
 */
import { randomBytes } from "node:crypto";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { findLlamaTools, generateFixtureFiles } from "@compat/testkit";
import { registryHarness } from "./helpers";

const harness = registryHarness("compat-cli-pull-");
const { temp, start, run } = harness;

/** Names in blobs/ that are neither a final blob nor anything else a finished pull keeps. */
async function leftovers(root: string): Promise<string[]> {
  // the store writer's staging folder (@compat/store STAGING_DIR) may stay, empty
  const staged = await readdir(join(root, "blobs", ".ollama-compat-tmp")).catch(() => [] as string[]);
  return [...(await readdir(join(root, "blobs"))).filter((n) => !/^sha256-[0-9a-f]{64}$/.test(n) && n !== ".ollama-compat-tmp"), ...staged];
}

/** A small deterministic PRNG, so a failing run can be replayed from its seed. */
function prng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

describe("ollama-compat pull (real registry)", () => {
  it("pulls into the store: ls lists it, serve answers it", async () => {
    const fx = await generateFixtureFiles("gemma3", { seed: 5, layout: "ollama", variant: "1b" }, await temp());
    const pushed = await harness.registry.pushModel({ name: "library/gemma3:1b", model: fx.text, params: { num_ctx: 512 } });
    const root = await temp();
    const r = await run(["pull", pushed.ref, "--insecure", "--models", root]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`pulled ${pushed.ref} into ${root}`);
    // in a log, one line per layer
    expect(r.stderr.trim().split("\n")).toHaveLength(pushed.layers.length + 1);
    expect(r.stderr).toMatch(/^pulling [0-9a-f]{12} \(\d/m);
    const ls = await run(["ls", "--json", "--models", root, "--cache-dir", await temp()]);
    expect(ls.code, ls.stderr).toBe(0);
    const listed = (JSON.parse(ls.stdout) as { models: Array<{ name: string; status: string; architecture?: string }> }).models;
    expect(listed).toEqual([{ name: pushed.ref, size: expect.any(Number), architecture: "gemma3", status: "translatable" }]);
    const tools = await findLlamaTools();
    const s = start(["serve", pushed.ref, "--models", root, "--cache-dir", await temp(), "--llama-server", tools.server, "--", "--threads", "2", "--no-warmup"]);
    const [url] = await s.waitFor(/^http:\/\/127\.0\.0\.1:\d+$/m);
    const chat = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 3, temperature: 0, grammar: "root ::= [ -~]*" }),
    });
    expect(chat.status, await chat.clone().text()).toBe(200);
    s.child.kill("SIGTERM");
    await s.closed;
  }, 300_000);

  const kills = Number(process.env.PULL_KILLS ?? 5);
  it("SIGKILLed at random moments N times ($PULL_KILLS, default 5), then run again: the same bytes, nothing left over", async () => {
    const seed = Number(process.env.PULL_SEED ?? Date.now() % 1e9);
    const random = prng(seed);
    const bytes = randomBytes(40 << 20);
    const pushed = await harness.registry.pushModel({ name: "library/killed:1", model: bytes, params: { num_ctx: 512 } });
    const root = await temp();
    const env = { OLLAMA_COMPAT_PULL_MIN_PART_BYTES: String(1 << 20) };
    const layer = pushed.layers[0]!;
    for (let i = 0; i < kills; i++) {
      const s = start(["pull", pushed.ref, "--insecure", "--models", root, "--json"], env);
      // a moment: before any byte (at start-up), or once a random share of the layer has come
      const share = random();
      if (share < 0.2) await new Promise((r) => setTimeout(r, share * 5000));
      else {
        const total = layer.size;
        await s.waitFor(new RegExp(`"digest":"${layer.digest}","total":${total},"completed":(\\d+)`)).catch(() => undefined);
        for (;;) {
          const done = [...s.out.stdout.matchAll(/"completed":(\d+)/g)].map((m) => Number(m[1]));
          if ((done.at(-1) ?? 0) >= share * total || s.child.exitCode !== null) break;
          await new Promise((r) => setTimeout(r, 5));
        }
      }
      s.child.kill("SIGKILL");
      await s.closed;
      // whatever the moment, nothing is under a final name unless it is whole
      const names = await readdir(join(root, "blobs")).catch(() => [] as string[]);
      const final = `sha256-${layer.digest.slice(7)}`;
      if (names.includes(final)) expect(Buffer.compare(await readFile(join(root, "blobs", final)), bytes), `seed ${seed}`).toBe(0);
    }
    const r = await run(["pull", pushed.ref, "--insecure", "--models", root, "--json"], env);
    expect(r.code, `seed ${seed}: ${r.stderr}`).toBe(0);
    const events = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { status: string });
    expect(events.at(-1)).toEqual({ status: "success" });
    expect(Buffer.compare(await readFile(join(root, "blobs", `sha256-${layer.digest.slice(7)}`)), bytes), `seed ${seed}`).toBe(0);
    expect(await leftovers(root), `seed ${seed}`).toEqual([]);
    expect(Buffer.compare(await readFile(join(root, "manifests", harness.registry.host, "library", "killed", "1")), Buffer.from(pushed.manifest))).toBe(0);
  }, 120_000 + kills * 30_000);

  it("failures are one line: no registry there, a corrupted layer (and nothing of it kept)", async () => {
    const root = await temp();
    const port = await closedPort();
    const down = await run(["pull", `127.0.0.1:${port}/library/x:1`, "--insecure", "--models", root]);
    expect(down.code).toBe(1);
    expect(down.stderr).toBe(`ollama-compat: REGISTRY_UNREACHABLE: cannot reach 127.0.0.1:${port}: connection refused: nothing listens there (ECONNREFUSED)\n`);
    const barred = await run(["pull", "127.0.0.1:6665/library/x:1", "--insecure", "--models", root]);
    expect(barred.code).toBe(1);
    expect(barred.stderr).toBe(
      "ollama-compat: REGISTRY_UNREACHABLE: cannot reach 127.0.0.1:6665: port 6665 is one of the ports fetch() refuses to connect to (the Fetch standard's bad ports), whatever listens there; put the registry on another port\n",
    );
    const good = randomBytes(2 << 20);
    const pushed = await harness.registry.pushModel({ name: "library/bad:1", model: good });
    const layer = pushed.layers[0]!;
    const bad = Buffer.from(good);
    bad[7]! ^= 1;
    await writeFile(harness.registry.blobDataPath(layer.digest), bad);
    const r = await run(["pull", pushed.ref, "--insecure", "--models", root, "-q"]);
    expect(r.code).toBe(1);
    expect(r.stderr.split("\n").filter(Boolean)).toHaveLength(1);
    expect(r.stderr).toContain(`DIGEST_MISMATCH: layer ${layer.digest} (application/vnd.ollama.image.model) of ${pushed.ref}`);
    expect(await readdir(join(root, "blobs")).then((n) => n.filter((x) => x.startsWith("sha256")))).toEqual([]);
    expect(await leftovers(root)).toEqual([]);
  });
});

/** A port nothing listens on (bound, then released). */
function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer().listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}
