import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { link as ln, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { serializeGguf } from "@compat/gguf";
import { generateFixture, guardSource, writeFixture } from "@compat/testkit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { llavaProjector } from "../../clip/test/llava-fixture";
import { bin, runToEnd, tsx, type Run } from "./helpers";

/** Runs the real ollama-compat binary (from source, through tsx) in its own process. */
function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return runToEnd(spawn(process.execPath, ["--import", tsx, bin, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] }));
}

let dir: string;
let ollamaPath: string;
let nativePath: string;
let visionPath: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-cli-"));
  ollamaPath = (await writeFixture(generateFixture("llama", { seed: 3, layout: "ollama", variant: "llama3-metadata-gap" }), dir)).text;
  nativePath = (await writeFixture(generateFixture("llama", { seed: 3, layout: "native" }), dir)).text;
  visionPath = (await writeFixture(generateFixture("gemma3", { seed: 3, layout: "ollama", variant: "4b-vision" }), dir)).text;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("ollama-compat translate", () => {
  it("writes the translated GGUF and leaves the source unchanged", async () => {
    const before = await readFile(ollamaPath);
    const out = join(dir, "out.gguf");
    const r = await cli(["translate", ollamaPath, "-o", out]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/llama3-metadata/);
    const inspected = JSON.parse((await cli(["inspect", out, "--json"])).stdout);
    const pre = inspected.metadata.find((kv: { key: string }) => kv.key === "tokenizer.ggml.pre");
    expect(pre).toEqual({ key: "tokenizer.ggml.pre", type: "STRING", value: "llama-bpe" });
    expect((await readFile(ollamaPath)).equals(before)).toBe(true);
  });

  it("writes nothing for a llama.cpp-native file and says so in one line", async () => {
    const out = join(dir, "native-out.gguf");
    const r = await cli(["translate", nativePath, "-o", out]);
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split("\n")).toHaveLength(1);
    expect(r.stdout).toMatch(/nothing to do/);
    expect(existsSync(out)).toBe(false);
  });

  it("--dry-run prints the report and writes nothing", async () => {
    const out = join(dir, "dry.gguf");
    const r = await cli(["translate", ollamaPath, "-o", out, "--dry-run"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/keys changed .*tokenizer\.ggml\.pre/);
    expect(existsSync(out)).toBe(false);
    const json = JSON.parse((await cli(["translate", ollamaPath, "--dry-run", "--json"])).stdout);
    expect(json.report.handlers[0].name).toBe("llama3-metadata");
  });

  it("does nothing when OLLAMA_LLAMA_CPP_COMPAT=0", async () => {
    const out = join(dir, "disabled.gguf");
    const r = await cli(["translate", ollamaPath, "-o", out], { OLLAMA_LLAMA_CPP_COMPAT: "0" });
    expect(r.code).toBe(0);
    expect(existsSync(out)).toBe(false);
  });

  it("--profile native (the default) lists each fix with its reason; --profile reference keeps the gaps", async () => {
    const def = JSON.parse((await cli(["translate", ollamaPath, "--dry-run", "--json"])).stdout);
    expect(def.report.profile).toBe("native");
    expect(def.report.fixes).toEqual([{ handler: "llama3-metadata", name: "llama3-add-bos", reason: expect.stringMatching(/add_bos_token/) }]);
    const ref = JSON.parse((await cli(["translate", ollamaPath, "--dry-run", "--json", "--profile", "reference"])).stdout);
    expect(ref.report.profile).toBe("reference");
    expect(ref.report.fixes).toEqual([]);
    expect(ref.report.gapsKept.map((f: { name: string }) => f.name)).toEqual(["llama3-add-bos"]);
    expect(ref.report.kv.changed).not.toContain("tokenizer.ggml.add_bos_token");
    expect(def.report.kv.changed).toContain("tokenizer.ggml.add_bos_token");
    const text = await cli(["translate", ollamaPath, "--dry-run"]);
    expect(text.stdout).toMatch(/fixes of reference gaps \(1, profile native\):\n {2}llama3-add-bos \[llama3-metadata\]: /);
    const refText = await cli(["translate", ollamaPath, "--dry-run", "--profile", "reference"]);
    expect(refText.stdout).toMatch(/reference gaps kept .*\n {2}llama3-add-bos/);
    // written output: the same profile again finds nothing to do
    const out = join(dir, "reference.gguf");
    expect((await cli(["translate", ollamaPath, "-o", out, "--profile", "reference"])).code).toBe(0);
    expect((await cli(["translate", out, "--dry-run", "--profile", "reference"])).stdout).toMatch(/nothing to do/);
    const detect = JSON.parse((await cli(["detect", ollamaPath, "--json", "--profile", "reference"])).stdout);
    expect(detect.profile).toBe("reference");
    expect(detect.handlers[0].name).toBe("llama3-metadata");
  });

  it("--profile reaches the projector too: the clip side's fixes under native, kept as gaps under reference", async () => {
    const path = (await writeFixture(generateFixture("deepseekocr", { seed: 3, layout: "ollama", variant: "3b-8-heads" }), dir)).text;
    const fixes = ["deepseekocr-clip-feed-forward-length", "deepseekocr-clip-projection-dim"];
    const def = JSON.parse((await cli(["translate", path, "--dry-run", "--json"])).stdout);
    expect(def.mmproj.report.profile).toBe("native");
    expect(def.mmproj.report.fixes.map((f: { name: string }) => f.name)).toEqual(fixes);
    const ref = JSON.parse((await cli(["translate", path, "--dry-run", "--json", "--profile", "reference"])).stdout);
    expect(ref.mmproj.report.profile).toBe("reference");
    expect(ref.mmproj.report.fixes).toEqual([]);
    expect(ref.mmproj.report.gapsKept.map((f: { name: string }) => f.name)).toEqual(fixes);
  });

  it("an unknown --profile is a usage error (exit 2)", async () => {
    const r = await cli(["translate", ollamaPath, "--dry-run", "--profile", "exact"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/native, reference/);
  });

  it("refuses to overwrite its input (usage error, exit 2)", async () => {
    const r = await cli(["translate", ollamaPath, "-o", ollamaPath]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/must not be the input/);
  });

  it("refuses its input under another name: a symlinked directory, a symlink to it, a hard link", async () => {
    const guard = await guardSource(ollamaPath);
    const via = join(dir, "via");
    await symlink(dir, via);
    const link = join(dir, "link.gguf");
    await symlink(ollamaPath, link);
    const hard = join(dir, "hard.gguf");
    await ln(ollamaPath, hard);
    try {
      // the first used to replace the source with the translation (the rename went through the symlinked directory)
      for (const [src, out] of [[ollamaPath, join(via, basename(ollamaPath))], [link, ollamaPath], [ollamaPath, link], [ollamaPath, hard]] as const) {
        const r = await cli(["translate", src, "-o", out]);
        expect(r.code).toBe(2);
        expect(r.stderr).toMatch(/must not be the input/);
      }
      await guard.assertUnchanged();
    } finally {
      for (const p of [via, link, hard]) await rm(p, { force: true });
    }
  });
});

describe("ollama-compat translate on a monolithic vision blob", () => {
  const inspect = async (path: string) => JSON.parse((await cli(["inspect", path, "--json"])).stdout);
  const arch = (j: { metadata: { key: string; value: unknown }[] }) => j.metadata.find((kv) => kv.key === "general.architecture")?.value;

  it("without --mmproj: writes mmproj-<OUT> beside OUT and says so on stderr", async () => {
    const out = join(dir, "vision.gguf");
    const r = await cli(["translate", visionPath, "-o", out]);
    expect(r.code).toBe(0);
    const mmproj = join(dir, "mmproj-vision.gguf");
    expect(r.stderr).toContain(mmproj);
    expect(r.stderr).toMatch(/projector/);
    expect(r.stdout).toMatch(/gemma3-clip/);
    expect(arch(await inspect(out))).toBe("gemma3");
    const proj = await inspect(mmproj);
    expect(arch(proj)).toBe("clip");
    expect(proj.tensors.every((t: { name: string }) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(true);
  });

  it("--mmproj PATH writes the projector there, quietly", async () => {
    const out = join(dir, "vision2.gguf");
    const mmproj = join(dir, "proj.gguf");
    const r = await cli(["translate", visionPath, "-o", out, "--mmproj", mmproj, "--json"]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    const json = JSON.parse(r.stdout);
    expect(json.output).toBe(out);
    expect(json.mmproj.output).toBe(mmproj);
    expect(json.mmproj.report.handlers[0].name).toBe("gemma3-clip");
    expect(existsSync(join(dir, "mmproj-vision2.gguf"))).toBe(false);
    expect(arch(await inspect(mmproj))).toBe("clip");
  });

  it("--dry-run reports both views and writes neither", async () => {
    const out = join(dir, "vision-dry.gguf");
    const r = await cli(["translate", visionPath, "-o", out, "--dry-run"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/handlers: gemma3 /);
    expect(r.stdout).toMatch(/mmproj \(.*mmproj-vision-dry\.gguf\):\n  handlers: gemma3-clip/);
    expect(existsSync(out)).toBe(false);
    expect(existsSync(join(dir, "mmproj-vision-dry.gguf"))).toBe(false);
    const json = JSON.parse((await cli(["translate", visionPath, "--dry-run", "--json"])).stdout);
    expect(json.report.handlers[0].name).toBe("gemma3");
    expect(json.mmproj.report.arch).toEqual({ from: "gemma3", to: "clip" });
    expect(json.mmproj.size).toBeGreaterThan(0);
  });

  it("a separate LLaVA projector blob is itself the output: -o gets it with its projector type named", async () => {
    const blob = join(dir, "llava-projector-blob");
    await writeFile(blob, await serializeGguf(llavaProjector()));
    const out = join(dir, "llava-mmproj.gguf");
    const r = await cli(["translate", blob, "-o", out]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/llava-projector-type/);
    const proj = await inspect(out);
    expect(proj.metadata.find((kv: { key: string }) => kv.key === "clip.projector_type")?.value).toBe("mlp");
    expect(existsSync(join(dir, "mmproj-llava-mmproj.gguf"))).toBe(false);
  });

  it("a text-only blob has no projector: --mmproj writes nothing and says so", async () => {
    const mmproj = join(dir, "none-mmproj.gguf");
    const r = await cli(["translate", ollamaPath, "-o", join(dir, "text-only.gguf"), "--mmproj", mmproj]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/no vision\/audio projector/);
    expect(existsSync(mmproj)).toBe(false);
  });
});

describe("ollama-compat detect and inspect", () => {
  it("detect names the handler and its markers, or says there is nothing to do", async () => {
    const hit = await cli(["detect", ollamaPath]);
    expect(hit.code).toBe(0);
    expect(hit.stdout).toMatch(/llama3-metadata \(markers: .*<\|eot_id\|>/);
    const miss = await cli(["detect", nativePath]);
    expect(miss.stdout).toMatch(/nothing to do/);
    const vision = await cli(["detect", visionPath]);
    expect(vision.stdout).toMatch(/: gemma3 \(markers: /);
    expect(vision.stdout).toMatch(/: mmproj gemma3-clip \(markers: embedded vision tensors v\.\*/);
  });

  it("inspect lists KVs with GGUF types and tensors with dtype and shape", async () => {
    const r = await cli(["inspect", nativePath]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/general\.architecture: STRING = "llama"/);
    expect(r.stdout).toMatch(/tokenizer\.ggml\.tokens: ARRAY<STRING>\[128256\] = \[/);
    expect(r.stdout).toMatch(/token_embd\.weight\s+\w+\s+\[\d+, 128256\]\s+[\d.]+ MiB/);
  });
});

describe("errors and usage", () => {
  it("a missing file is one line on stderr and exit 1", async () => {
    const r = await cli(["inspect", join(dir, "nope.gguf")]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/nope\.gguf/);
  });

  it("a truncated GGUF names the file and offset, without a stack trace", async () => {
    const bad = join(dir, "truncated.gguf");
    await writeFile(bad, (await readFile(nativePath)).subarray(0, 100));
    const r = await cli(["detect", bad]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/truncated\.gguf/);
    expect(r.stderr).toMatch(/offset/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it("bad usage exits 2", async () => {
    expect((await cli([])).code).toBe(2);
    expect((await cli(["frobnicate"])).code).toBe(2);
    expect((await cli(["translate"])).code).toBe(2);
    expect((await cli(["translate", ollamaPath])).code).toBe(2);
    expect((await cli(["--help"])).code).toBe(0);
  });
});

describe("groupThousands", () => {
  it("prints integers as toLocaleString(\"en-US\") does, without it", async () => {
    const { groupThousands } = await import("../src/format");
    const xs = [0, 1, -1, 999, 1000, -1000, 999_999, 1_000_000, 123_456_789, Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, 1.5, 2 ** 60, NaN, Infinity];
    for (let digits = 1; digits <= 16; digits++) xs.push(Math.floor(10 ** (digits - 1) * (1 + (digits % 9))));
    for (const x of xs) expect(groupThousands(x), String(x)).toBe(x.toLocaleString("en-US"));
  });
});
