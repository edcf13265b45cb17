/**
 * `ollama-compat pull NAME --to DIR` against a real OCI registry (Debian's docker-registry, seeded
 * through its upload API): the files of every vision fixture equal what `translate` writes (text
 * GGUF and --mmproj), the folder is served by the real llama-server through its models.ini and
 * llama-mtmd-cli answers an image with the pair; a corrupted layer or a pull killed midway leaves
 * no file under a final name, and the next pull continues what the killed one recorded.
 */
import { readdir, readFile, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { freePort, LlamaChild, waitHealthy } from "@compat/server-bridge";
import { fileDigest, allFixtureVariants, findLlamaTools, generateFixtureFiles, runMtmdCli } from "@compat/testkit";
import { exportPaths } from "../src/commands/export";
import { pullCommand } from "../src/commands/pull";
import { translateCommand } from "../src/commands/translate";
import type { CliIo } from "../src/io";
import { testImage } from "../src/llama-check";
import { registryHarness, withZeroTensor } from "./helpers";

const harness = registryHarness("compat-cli-pull-to-");
const { temp, start, run } = harness;

/** The command in this process (no binary start-up per fixture), its output collected. */
function io(): CliIo & { stdout: string; stderr: string } {
  const r = { stdout: "", stderr: "", env: { ...process.env }, out: (t: string) => void (r.stdout += t), err: (t: string) => void (r.stderr += t) };
  return r;
}

/** Every name under `dir` (recursively) that is not a finished file: temp files of writers, a pull's partial files, records and locks. */
async function tempFiles(dir: string): Promise<string[]> {
  const names = await readdir(dir, { recursive: true }).catch(() => [] as string[]);
  return names.filter((n) => /(^|\/)\.[^/]+\.\d+\.[0-9a-f]+\.tmp$/.test(n) || /(^|\/)\.[^/]+\.pulling(\.json|\.lock)?$/.test(n));
}

/** The resume record a killed pull left beside `model` (its verified prefix), if any. */
async function resumeRecord(model: string): Promise<{ verified: number } | undefined> {
  const path = join(dirname(model), `.${basename(model)}.pulling.json`);
  return JSON.parse(await readFile(path, "utf8").catch(() => "null")) ?? undefined;
}

/** The .gguf files under `dir`. */
async function ggufs(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true }).catch(() => [] as string[])).filter((n) => n.endsWith(".gguf")).sort();
}

describe("pull --to DIR (real registry)", () => {
  it("every vision fixture: the text GGUF and the mmproj equal translate's output and its --mmproj output", async () => {
    const fixtures = await temp();
    const to = await temp();
    const vision = allFixtureVariants().filter((v) => v.vision);
    expect(vision.length).toBeGreaterThan(5);
    for (const [i, v] of vision.entries()) {
      const fx = await generateFixtureFiles(v.arch, { seed: 7, layout: "ollama", variant: v.variant }, join(fixtures, String(i)));
      const pushed = await harness.registry.pushModel({ name: `library/v${i}:${v.variant.replace(/[^A-Za-z0-9_.-]/g, "_")}`, model: fx.text, params: { num_ctx: 512 }, template: "{{ .Prompt }}" });
      const out = io();
      await pullCommand(pushed.ref, { insecure: true, to, quiet: true }, out);
      const name = out.stdout.split(" -> ")[0]!;
      const paths = exportPaths(to, name, "models-dir", true);
      const text = join(fixtures, `${i}.text.gguf`);
      const mmproj = join(fixtures, `${i}.mmproj.gguf`);
      await translateCommand(fx.text, { output: text, mmproj, quiet: true }, io());
      expect(await fileDigest(paths.model), `${v.arch} ${v.variant}: text`).toBe(await fileDigest(text));
      expect(await fileDigest(paths.mmproj), `${v.arch} ${v.variant}: mmproj`).toBe(await fileDigest(mmproj));
    }
    // one models.ini for them all, each model's section naming its pair
    const ini = await readFile(join(to, "models.ini"), "utf8");
    expect(ini.match(/^\[/gm)?.length).toBe(vision.length);
    expect(ini.match(/^mmproj = /gm)?.length).toBe(vision.length);
    expect(await tempFiles(to)).toEqual([]);
  }, 900_000);

  it("the binary: llama-server serves the folder through its models.ini (text and image), llama-mtmd-cli answers an image with the pair", async () => {
    const fx = await generateFixtureFiles("gemma3", { seed: 5, layout: "ollama", variant: "4b-vision" }, await temp());
    const pushed = await harness.registry.pushModel({ name: "library/gemma3:4b", model: fx.text, params: { num_ctx: 1024 } });
    const to = await temp();
    const r = await run(["pull", pushed.ref, "--insecure", "--to", to, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const events = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { status: string; digest?: string; total?: number; completed?: number });
    expect(events[0]).toEqual({ status: "pulling manifest" });
    expect(events.at(-1)).toEqual({ status: "success" });
    const model = pushed.layers.find((l) => l.mediaType.endsWith(".model"))!;
    expect(events).toContainEqual({ status: `pulling ${model.digest.slice(7, 19)}`, digest: model.digest, total: model.size, completed: model.size });
    const name = `${harness.registry.host}/library/gemma3:4b`;
    const paths = exportPaths(to, name, "models-dir", true);
    expect(await ggufs(to)).toEqual([paths.model, paths.mmproj].map((p) => p.slice(to.length + 1)).sort());

    const tools = await findLlamaTools();
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const router = new LlamaChild({ command: tools.server, args: ["--models-preset", join(to, "models.ini"), "--port", String(port), "--no-webui", "--offline", "--models-max", "1", "--threads", "2", "--no-warmup"] });
    try {
      await waitHealthy(router, url, 120_000);
      const chat = (content: unknown) =>
        fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: name, messages: [{ role: "user", content }], max_tokens: 3, temperature: 0, grammar: "root ::= [ -~]*" }),
          signal: AbortSignal.timeout(240_000),
        });
      const text = await chat("hello");
      expect(text.status, await text.clone().text()).toBe(200);
      const image = `data:image/ppm;base64,${testImage().toString("base64")}`;
      const seen = await chat([{ type: "text", text: "what is it?" }, { type: "image_url", image_url: { url: image } }]);
      expect(seen.status, await seen.clone().text()).toBe(200);
    } finally {
      await router.stop();
    }
    const picture = join(to, "image.ppm");
    await writeFile(picture, testImage());
    const mtmd = await runMtmdCli({ model: paths.model, mmproj: paths.mmproj, image: picture, prompt: "What is in this image?", timeoutMs: 600_000 });
    expect(mtmd.ok, mtmd.stderr.slice(-2000)).toBe(true);
  }, 900_000);

  it("--layout lmstudio and llama-swap: export's file names and configuration; a native model is its blob, digest-checked", async () => {
    const dir = await temp();
    const fx = await generateFixtureFiles("gemma3", { seed: 5, layout: "ollama", variant: "4b-vision" }, join(dir, "o"));
    const native = await generateFixtureFiles("llama", { seed: 3, layout: "native" }, join(dir, "n"));
    const vision = await harness.registry.pushModel({ name: "acme/eyes:2", model: fx.text });
    const plain = await harness.registry.pushModel({ name: "library/tiny:native", model: native.text, params: { stop: ["User:"] } });
    const lm = join(dir, "lmstudio");
    const a = io();
    await pullCommand(vision.ref, { insecure: true, to: lm, layout: "lmstudio", quiet: true }, a);
    const lmPaths = exportPaths(lm, `${harness.registry.host}/acme/eyes:2`, "lmstudio", true);
    expect(lmPaths.model).toContain(join(lm, "acme", "eyes-2"));
    expect(await ggufs(lm)).toEqual([lmPaths.model, lmPaths.mmproj].map((p) => p.slice(lm.length + 1)).sort());
    // pulled again: the files it made are replaced, nothing else appears
    const before = await fileDigest(lmPaths.model);
    await pullCommand(vision.ref, { insecure: true, to: lm, layout: "lmstudio", quiet: true }, io());
    expect(await fileDigest(lmPaths.model)).toBe(before);
    expect(await ggufs(lm)).toHaveLength(2);
    const swap = join(dir, "swap");
    await pullCommand(plain.ref, { insecure: true, to: swap, layout: "llama-swap", quiet: true, llamaServer: "/opt/llama-server" }, io());
    const nativePath = exportPaths(swap, `${harness.registry.host}/library/tiny:native`, "llama-swap", false).model;
    expect(Buffer.compare(await readFile(nativePath), await readFile(native.text))).toBe(0);
    const yaml = await readFile(join(swap, "llama-swap.yaml"), "utf8");
    expect(yaml).toContain("/opt/llama-server");
    expect(yaml).toContain(nativePath);
    expect(yaml).toContain("--reverse-prompt User:");
  }, 300_000);

  it("a corrupted layer: one line naming the layer, no file under a final name, no temp file", async () => {
    const fx = await generateFixtureFiles("gemma3", { seed: 6, layout: "ollama", variant: "4b-vision" }, await temp());
    const pushed = await harness.registry.pushModel({ name: "library/bad:vision", model: fx.text });
    const layer = pushed.layers.find((l) => l.mediaType.endsWith(".model"))!;
    const bad = await readFile(harness.registry.blobDataPath(layer.digest));
    bad[bad.length - 5]! ^= 1; // in the tensor data: the header parses, the digest is found wrong at the end
    await writeFile(harness.registry.blobDataPath(layer.digest), bad);
    const to = await temp();
    const r = await run(["pull", pushed.ref, "--insecure", "--to", to, "-q"]);
    expect(r.code).toBe(1);
    expect(r.stderr.split("\n").filter(Boolean)).toHaveLength(1);
    expect(r.stderr).toContain(`DIGEST_MISMATCH: layer ${layer.digest} (application/vnd.ollama.image.model) of ${pushed.ref}`);
    expect(await ggufs(to)).toEqual([]);
    expect(await tempFiles(to)).toEqual([]);
    expect((await readdir(to)).filter((n) => n === "models.ini")).toEqual([]);
  }, 300_000);

  const kills = Number(process.env.PULL_KILLS ?? 3);
  it("SIGKILLed midway N times ($PULL_KILLS, default 3): never a final name; the next pull continues from the killed one's record and leaves nothing else", async () => {
    const dir = await temp();
    const small = await generateFixtureFiles("gemma3", { seed: 8, layout: "ollama", variant: "4b-vision" }, dir);
    const big = await withZeroTensor(small.text, dir, "big", 48 << 20);
    const pushed = await harness.registry.pushModel({ name: "library/killed:vision", model: big });
    const layer = pushed.layers.find((l) => l.mediaType.endsWith(".model"))!;
    const to = await temp();
    const paths = exportPaths(to, `${harness.registry.host}/library/killed:vision`, "models-dir", true);
    /** The first progress a run reports for the model layer's bytes: where it started. */
    const startedAt = (stdout: string) => [...stdout.matchAll(new RegExp(`"digest":"${layer.digest}","total":\\d+,"completed":(\\d+)`, "g"))].map((m) => Number(m[1]))[0];
    let midway = 0;
    for (let i = 0; i < kills; i++) {
      const before = await resumeRecord(paths.model);
      const s = start(["pull", pushed.ref, "--insecure", "--to", to, "--json"]);
      const share = (i + 1) / (kills + 1);
      for (;;) {
        const done = [...s.out.stdout.matchAll(/"completed":(\d+)/g)].map((m) => Number(m[1]));
        const far = (done.at(-1) ?? 0) >= share * layer.size * 0.9;
        // the last kill comes once the run recorded a prefix past where it started, so that the final pull has one to continue
        const recorded = i < kills - 1 || ((await resumeRecord(paths.model))?.verified ?? 0) > (before?.verified ?? 0);
        if ((far && recorded) || s.child.exitCode !== null) break;
        await new Promise((r) => setTimeout(r, 2));
      }
      s.child.kill("SIGKILL");
      await s.closed;
      // a run continues the prefix the one before it recorded
      if (before !== undefined && before.verified < layer.size) expect(startedAt(s.out.stdout) ?? before.verified).toBe(before.verified);
      // killed before the renames: nothing final (a pull that won the race is whole, as checked below)
      if (!s.out.stdout.includes('"status":"writing files"')) {
        midway++;
        expect(await ggufs(to)).toEqual([]);
      }
    }
    expect(midway).toBeGreaterThan(0);
    const left = await resumeRecord(paths.model);
    const r = await run(["pull", pushed.ref, "--insecure", "--to", to, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    if (midway === kills) {
      expect(left?.verified).toBeGreaterThan(0);
      expect(startedAt(r.stdout)).toBe(left!.verified);
    }
    const text = join(dir, "t.gguf");
    const mmproj = join(dir, "m.gguf");
    await translateCommand(big, { output: text, mmproj, quiet: true }, io());
    expect(await fileDigest(paths.model)).toBe(await fileDigest(text));
    expect(await fileDigest(paths.mmproj)).toBe(await fileDigest(mmproj));
    expect(await tempFiles(to)).toEqual([]);

    // Ctrl-C midway: no final name, and what it recorded is continued
    const again = await temp();
    const s = start(["pull", pushed.ref, "--insecure", "--to", again, "--json"]);
    await s.waitFor(/"completed":[1-9]/);
    s.child.kill("SIGINT");
    const { signal, code } = await s.closed;
    expect(signal === "SIGINT" || code === 130, `${signal} ${code}`).toBe(true);
    if (!s.out.stdout.includes('"status":"writing files"')) expect(await ggufs(again)).toEqual([]);
    expect((await tempFiles(again)).filter((n) => n.endsWith(".tmp"))).toEqual([]);
    const resumed = await run(["pull", pushed.ref, "--insecure", "--to", again, "-q"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const againPaths = exportPaths(again, `${harness.registry.host}/library/killed:vision`, "models-dir", true);
    expect(await fileDigest(againPaths.model)).toBe(await fileDigest(text));
    expect(await tempFiles(again)).toEqual([]);
  }, 300_000 + kills * 60_000);
});
