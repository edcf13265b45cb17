import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { link as ln, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { generateFixture, guardSource, writeFixture } from "@compat/testkit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const bin = fileURLToPath(new URL("../src/bin.ts", import.meta.url));
const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the real ollama-compat binary (from source, through tsx) in its own process. */
function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", tsx, bin, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

let dir: string;
let ollamaPath: string;
let nativePath: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-cli-"));
  ollamaPath = (await writeFixture(generateFixture("llama", { seed: 3, layout: "ollama", variant: "llama3-metadata-gap" }), dir)).text;
  nativePath = (await writeFixture(generateFixture("llama", { seed: 3, layout: "native" }), dir)).text;
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

describe("ollama-compat detect and inspect", () => {
  it("detect names the handler and its markers, or says there is nothing to do", async () => {
    const hit = await cli(["detect", ollamaPath]);
    expect(hit.code).toBe(0);
    expect(hit.stdout).toMatch(/llama3-metadata \(markers: .*<\|eot_id\|>/);
    const miss = await cli(["detect", nativePath]);
    expect(miss.stdout).toMatch(/nothing to do/);
  });

  it("inspect lists KVs with GGUF types and tensors with dtype and shape", async () => {
    const r = await cli(["inspect", nativePath]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/general\.architecture: STRING = "llama"/);
    expect(r.stdout).toMatch(/tokenizer\.ggml\.tokens: ARRAY<STRING>\[128256\] = \[/);
    expect(r.stdout).toMatch(/token_embd\.weight: \w+ \[\d+, 128256\]/);
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
