/**
 * The whole command as a user runs it: the BUILT binary (dist/bin.cjs, built here when
 * missing) in its own process, against testkit fixtures and a fake Ollama store on disk;
 * the progress bar through a real pseudo-terminal (util-linux `script`); llama.cpp's
 * own llama-server for verify, export and demo.
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { SourceMap, type SourceMapPayload } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { serializeGguf, writeGguf } from "@compat/gguf";
import { TRANSLATION_PROFILES } from "@compat/handlers";
import { buildOllamaStore } from "@compat/store";
import { findLlamaTools, generateFixture, generateFixtureFiles, generateFixtureSpecs, toGgufModel } from "@compat/testkit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BUNDLE, loadBundle, readCodeCache } from "../src/bundle-loader";
import { PROFILES } from "../src/cli";
import { DEMO_FIXTURE } from "../src/demo-fixture";
import { runToEnd, type Run } from "./helpers";

interface V8Script {
  url: string;
  functions: Array<{ ranges: Array<{ startOffset: number; endOffset: number; count: number }> }>;
}

const pkg = fileURLToPath(new URL("..", import.meta.url));
const bin = join(pkg, "dist", "bin.cjs");

/** Runs the built binary (dist/bin.cjs) in its own process. */
function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  return runToEnd(spawn(process.execPath, [bin, ...args], { env: { ...process.env, NO_COLOR: undefined, ...env }, stdio: ["ignore", "pipe", "pipe"] }));
}

/** The binary on a pseudo-terminal (stdin, stdout and stderr all the tty): what a person at a terminal sees. */
function tty(args: string[], env: Record<string, string> = {}): { code: number; output: string } {
  const command = [process.execPath, bin, ...args].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ");
  try {
    const output = execFileSync("script", ["-qec", command, "/dev/null"], { env: { ...process.env, COLUMNS: "100", ...env }, encoding: "utf8" });
    return { code: 0, output };
  } catch (e) {
    const err = e as { status: number; stdout: string };
    return { code: err.status, output: err.stdout };
  }
}

let dir: string;
let ollama: string;
let native: string;
let vision: string;
let visionNative: string;
let unknownArch: string;
let storeRoot: string;
let llamaServer: string | undefined;

beforeAll(async () => {
  if (!existsSync(bin)) execFileSync("npm", ["run", "build"], { cwd: pkg, stdio: "ignore" });
  dir = await mkdtemp(join(tmpdir(), "compat-cli-commands-"));
  ollama = (await generateFixtureFiles("llama", { seed: 3, layout: "ollama", variant: "llama3-metadata-gap" }, dir)).text;
  native = (await generateFixtureFiles("llama", { seed: 3, layout: "native" }, dir)).text;
  vision = (await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }, dir)).text;
  visionNative = (await generateFixtureFiles("gemma3", { seed: 1, layout: "native", variant: "4b-vision" }, dir)).text;
  // An Ollama-written file of an architecture no handler knows: the gemma3 1b fixture with
  // its arch renamed to "gemma9" ("gemma9." keys sort exactly where "gemma3." ones did).
  const spec = generateFixtureSpecs("gemma3", { seed: 4, layout: "ollama", variant: "1b" }).text;
  spec.kvs.splice(
    0,
    spec.kvs.length,
    ...spec.kvs.map((kv) =>
      kv.key === "general.architecture"
        ? { ...kv, value: "gemma9" }
        : kv.key.startsWith("gemma3.")
          ? { ...kv, key: `gemma9.${kv.key.slice("gemma3.".length)}` }
          : kv,
    ),
  );
  unknownArch = join(dir, "gemma9-ollama.gguf");
  await writeGguf(toGgufModel(spec), unknownArch);

  storeRoot = join(dir, "store");
  await buildOllamaStore(storeRoot, [
    { name: "gemma3:4b", model: vision, params: { num_ctx: 1024 } },
    { name: "llama3:tiny", model: ollama, params: { num_ctx: 512 } },
    { name: "tiny-llama:native", model: native },
  ]);
  await buildOllamaStore(join(dir, "store2"), [{ name: "future:1b", model: unknownArch }]);
  try {
    llamaServer = (await findLlamaTools()).server;
  } catch {
    llamaServer = undefined;
  }
}, 600_000);
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("conventions", () => {
  it("--version and --help; every command's --help has examples, exit codes and its environment", async () => {
    expect((await cli(["--version"])).stdout).toMatch(/^\d+\.\d+\.\d+/);
    const top = await cli(["--help"]);
    expect(top.code).toBe(0);
    for (const c of ["translate", "detect", "inspect", "diff", "serve", "ls", "pull", "export", "verify", "demo"]) {
      expect(top.stdout).toMatch(new RegExp(`^  ${c}\\b`, "m"));
      const h = await cli([c, "--help"]);
      expect(h.code, c).toBe(0);
      expect(h.stdout, c).toMatch(/Examples:\n {2}\$ ollama-compat /);
      expect(h.stdout, c).toMatch(/Exit codes: .*0/);
      expect(h.stdout, c).toMatch(/Environment:\n/);
    }
    expect((await cli(["detect", "--help"])).stdout).toMatch(/3 Ollama-format but not supported/);
    expect(top.stdout).toMatch(/OLLAMA_MODELS[\s\S]*OLLAMA_LLAMA_CPP_COMPAT[\s\S]*LLAMA_SERVER[\s\S]*NO_COLOR/);
  });

  it("--help and inspect load no handler, clip or server code: every command's dependencies are imported when it runs", async () => {
    // dist/cli.cjs inlines every dependency (minified) and esbuild initialises a dynamically
    // imported module on its first use. V8's coverage of real runs shows which functions ran at
    // all; the bundle's source map names the source file each one comes from.
    const bundle = join(pkg, "dist", "cli.cjs");
    const source = readFileSync(bundle, "utf8");
    const map = new SourceMap(JSON.parse(readFileSync(`${bundle}.map`, "utf8")) as SourceMapPayload);
    const lineStarts = [0, ...Array.from(source.matchAll(/\n/g), (m) => m.index! + 1)];
    const lineColumn = (at: number): [number, number] => {
      let lo = 0;
      let hi = lineStarts.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (lineStarts[mid]! <= at) lo = mid;
        else hi = mid - 1;
      }
      return [lo, at - lineStarts[lo]!];
    };
    const ran = async (args: string[]): Promise<string[]> => {
      const cov = await mkdtemp(join(dir, "coverage-"));
      expect((await cli(args, { NODE_V8_COVERAGE: cov })).code, args.join(" ")).toBe(0);
      const scripts = readdirSync(cov).flatMap((f) => (JSON.parse(readFileSync(join(cov, f), "utf8")) as { result: V8Script[] }).result);
      const script = scripts.find((s) => s.url === bundle || s.url === pathToFileURL(bundle).href)!;
      expect(script, "coverage of dist/cli.cjs").toBeDefined();
      // offsets count from the start of the compiled source: src/bundle-loader.ts's wrapper, then the file
      const offset = script.functions[0]!.ranges[0]!.endOffset - source.length - 3;
      const paths = new Set<string>();
      for (const fn of script.functions) {
        const at = fn.ranges[0]!.startOffset - offset;
        if (fn.ranges[0]!.count === 0 || at < 0) continue;
        const entry = map.findEntry(...lineColumn(at));
        const original = "originalSource" in entry ? entry.originalSource : undefined;
        if (original !== undefined) paths.add(original);
      }
      return [...paths];
    };
    // the packages' own sources sit at ../../<package>/src/… from dist/
    const packagesRun = (paths: string[]) => [...new Set(paths.filter((p) => p.startsWith("../../") && !p.includes("node_modules")).map((p) => p.split("/")[2]!))].sort();
    // files: the list of temp files in flight, which the signal handler of src/main.ts removes
    expect(packagesRun(await ran(["--help"]))).toEqual(["files"]);
    const inspect = await ran(["inspect", ollama]);
    expect(packagesRun(inspect)).toEqual(["files", "gguf"]);
    expect(inspect).toContain("../src/commands/inspect.ts");
    // and the check sees a command's dependencies when they do run
    expect(packagesRun(await ran(["detect", vision]))).toEqual(expect.arrayContaining(["clip", "gguf", "handlers"]));
  });

  it("the binary's V8 code cache is valid for this Node: V8 takes it instead of compiling dist/cli.cjs", () => {
    const dist = join(pkg, "dist");
    const cache = readCodeCache(dist);
    expect(cache, "dist/cli.cjs.cache (npm run build writes it)").toBeDefined();
    const { script, buildId, cached } = loadBundle(join(dist, CLI_BUNDLE), cache);
    expect(buildId).toMatch(/^[\w-]{20,}$/);
    expect(script.cachedDataRejected).toBe(false);
    expect(cached).toBe(true);
    // a cache made from another build of the bundle (same length, other id) is never handed to V8
    const other = Buffer.from(cache!);
    other.write(buildId!.replace(/^./, (c) => (c === "0" ? "1" : "0")), 0, "latin1");
    const foreign = loadBundle(join(dist, CLI_BUNDLE), other);
    expect(foreign.cached).toBe(false);
    expect(foreign.script.cachedDataRejected).toBeUndefined();
  });

  it("the profiles spelled out for a fast --help are the handlers' own", () => {
    expect([...PROFILES]).toEqual([...TRANSLATION_PROFILES]);
  });

  it("usage errors are one prefixed line and exit 2; with --json an error object on stderr", async () => {
    for (const args of [["frobnicate"], ["translate"], ["translate", ollama], ["diff", ollama], ["translate", ollama, "--dry-run", "--profile", "exact"]]) {
      const r = await cli(args);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr.trim().split("\n"), args.join(" ")).toHaveLength(1);
      expect(r.stderr, args.join(" ")).toMatch(/^ollama-compat: /);
    }
    const j = await cli(["translate", ollama, "--json"]);
    expect(j.code).toBe(2);
    expect(JSON.parse(j.stderr)).toEqual({ error: { code: "usage", message: expect.stringMatching(/-o OUT/) } });
    const missing = await cli(["inspect", join(dir, "nope.gguf"), "--json"]);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stderr).error.message).toMatch(/nope/);
  });

  it("-o '' and -o EXISTING_DIR are rejected before any work", async () => {
    const empty = await cli(["translate", ollama, "-o", ""]);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/^ollama-compat: -o: empty path/);
    const isDir = await cli(["translate", ollama, "-o", dir]);
    expect(isDir.code).toBe(2);
    expect(isDir.stderr).toMatch(/is a directory; expected a \.gguf file name/);
    const noParent = await cli(["translate", ollama, "-o", join(dir, "no", "such", "x.gguf")]);
    expect(noParent.code).toBe(2);
    expect(noParent.stderr).toMatch(/does not exist/);
  });

  it("errors are one line naming the file; the stack only with --debug", async () => {
    const bad = join(dir, "truncated.gguf");
    await writeGguf(toGgufModel(generateFixtureSpecs("llama", { seed: 3, layout: "native" }).text), bad);
    truncateSync(bad, 3000);
    const r = await cli(["inspect", bad]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/truncated\.gguf.*offset/);
    const d = await cli(["inspect", bad, "--debug"]);
    expect(d.stderr).toMatch(/\n\s+at /);
  });

  it("colour only on a terminal and never with NO_COLOR", async () => {
    expect((await cli(["detect", ollama])).stdout).not.toMatch(/\x1b\[/);
    expect(tty(["detect", ollama]).output).toMatch(/\x1b\[36mOllama-format, supported\x1b\[0m/);
    expect(tty(["detect", ollama], { NO_COLOR: "1" }).output).not.toMatch(/\x1b\[/);
  });
});

describe("detect: three verdicts, each with its exit code", () => {
  it("native: nothing to do, exit 0", async () => {
    const r = await cli(["detect", native]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/: native, nothing to do/);
    expect(JSON.parse((await cli(["detect", visionNative, "--json"])).stdout)).toMatchObject({ status: "native", ollamaWriter: null, exitCode: 0 });
  });

  it("Ollama-format and supported: the handlers and markers, exit 0", async () => {
    const r = await cli(["detect", vision]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/: Ollama-format, supported \(gemma3\)/);
    expect(r.stdout).toMatch(/: gemma3 \(markers: /);
    expect(r.stdout).toMatch(/: mmproj gemma3-clip \(markers: /);
    const j = JSON.parse((await cli(["detect", ollama, "--json"])).stdout);
    expect(j).toMatchObject({ status: "supported", exitCode: 0 });
    expect(j.ollamaWriter).toEqual(expect.arrayContaining([expect.stringMatching(/tensors sorted by \(block, name\)/), "KVs in byte-wise key order"]));
  });

  it("Ollama-format but not supported (an Ollama-written file of an unknown arch): exit 3, also for translate", async () => {
    const r = await cli(["detect", unknownArch]);
    expect(r.code).toBe(3);
    expect(r.stdout).toMatch(/Ollama-format but not supported by this version: neither a handler nor llama.cpp knows architecture "gemma9"/);
    expect(JSON.parse((await cli(["detect", unknownArch, "--json"])).stdout)).toMatchObject({ status: "not-supported", exitCode: 3 });
    const t = await cli(["translate", unknownArch, "-o", join(dir, "gemma9-out.gguf")]);
    expect(t.code).toBe(3);
    expect(t.stderr).toMatch(/^ollama-compat: .*gemma9-ollama\.gguf: Ollama-format .*"gemma9"; nothing written/);
    expect(existsSync(join(dir, "gemma9-out.gguf"))).toBe(false);
    const tj = await cli(["translate", unknownArch, "-o", join(dir, "gemma9-out.gguf"), "--json"]);
    expect(JSON.parse(tj.stderr).error.code).toBe("not-supported");
  });

  it("an Ollama-written file of an architecture llama.cpp knows and no handler gates on is native (Ollama hands it to llama.cpp unchanged)", async () => {
    // the gemma3 1b fixture renamed to "gemma2": llama.cpp knows that name, no handler gates on it
    const spec = generateFixtureSpecs("gemma3", { seed: 4, layout: "ollama", variant: "1b" }).text;
    spec.kvs.splice(
      0,
      spec.kvs.length,
      ...spec.kvs.map((kv) =>
        kv.key === "general.architecture" ? { ...kv, value: "gemma2" } : kv.key.startsWith("gemma3.") ? { ...kv, key: `gemma2.${kv.key.slice("gemma3.".length)}` } : kv,
      ),
    );
    const file = join(dir, "gemma2-ollama.gguf");
    await writeGguf(toGgufModel(spec), file);
    const r = await cli(["detect", file]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/: native, nothing to do \(llama\.cpp loads gemma2 as it is; written by Ollama, no handler needed\)/);
    expect(JSON.parse((await cli(["detect", file, "--json"])).stdout)).toMatchObject({ status: "native", ollamaWriter: expect.any(Array) });
  });

  it("ls gives an Ollama file of an unknown architecture the same verdict", async () => {
    const r = await cli(["ls", "--json", "--models", join(dir, "store2"), "--cache-dir", join(dir, "ls-cache")]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).models).toEqual([expect.objectContaining({ name: "future:1b", architecture: "gemma9", status: "not-supported", reason: expect.stringMatching(/"gemma9"/) })]);
  });

  it("a model reference is resolved in $OLLAMA_MODELS", async () => {
    const r = await cli(["detect", "gemma3:4b"], { OLLAMA_MODELS: storeRoot });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/gemma3:4b: Ollama-format, supported/);
  });
});

describe("inspect", () => {
  it("a summary line, a size column, long arrays abbreviated; --full shows them all", async () => {
    const r = await cli(["inspect", native]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^ {2}llama "Fixture Llama 3": \d+ KVs, \d+ tensors, [\d,]+ parameters, [\d.]+ MiB of tensor data/m);
    expect(r.stdout).toMatch(/tokenizer\.ggml\.tokens: ARRAY<STRING>\[128256\] = \[.*, … 128248 more\]/);
    expect(r.stdout).toMatch(/^ {2}token_embd\.weight\s+f16\s+\[16, 128256\]\s+3\.9 MiB$/m);
    const full = await cli(["inspect", native, "--full"]);
    expect(full.stdout).not.toMatch(/more\]/);
    expect(full.stdout.length).toBeGreaterThan(r.stdout.length * 10);
    const j = JSON.parse((await cli(["inspect", native, "--json"])).stdout);
    const tokens = j.metadata.find((kv: { key: string }) => kv.key === "tokenizer.ggml.tokens");
    expect(tokens).toMatchObject({ type: "ARRAY", itemType: "STRING", length: 128256, truncated: true });
    expect(tokens.value).toHaveLength(8);
    expect(j.tensors.find((t: { name: string }) => t.name === "token_embd.weight").bytes).toBe(16 * 128256 * 2);
    const jf = JSON.parse((await cli(["inspect", native, "--json", "--full"])).stdout);
    expect(jf.metadata.find((kv: { key: string }) => kv.key === "tokenizer.ggml.tokens").value).toHaveLength(128256);
  });
});

describe("translate: the progress bar", () => {
  it("on a terminal: bar, bytes, rate and ETA on stderr; --quiet silences it", async () => {
    const out = join(dir, "bar.gguf");
    const r = tty(["translate", ollama, "-o", out]);
    expect(r.code).toBe(0);
    expect(r.output).toMatch(/\rbar\.gguf \[#+\] 100% [\d.]+ MiB\/[\d.]+ MiB [\d.]+ [KMG]?i?B\/s ETA \d\d:\d\d/);
    const q = tty(["translate", ollama, "-o", join(dir, "bar-quiet.gguf"), "--quiet"]);
    expect(q.code).toBe(0);
    expect(q.output).not.toMatch(/\[#+/);
    expect(q.output).toMatch(/-> .*bar-quiet\.gguf/);
  });

  it("not on a terminal: stderr stays empty", async () => {
    const r = await cli(["translate", ollama, "-o", join(dir, "piped.gguf")]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
  });
});

describe("diff", () => {
  it("a translation against its native twin: KV and tensor differences, --json", async () => {
    const out = join(dir, "diff-src.gguf");
    expect((await cli(["translate", ollama, "-o", out])).code).toBe(0);
    const before = JSON.parse((await cli(["diff", ollama, native, "--json"])).stdout);
    const after = JSON.parse((await cli(["diff", out, native, "--json"])).stdout);
    // the translation fixed tokenizer.ggml.pre: a difference with the twin before, none after
    expect([...before.kv.changed.map((c: { key: string }) => c.key), ...before.kv.onlyA, ...before.kv.onlyB]).toContain("tokenizer.ggml.pre");
    expect([...after.kv.changed.map((c: { key: string }) => c.key), ...after.kv.onlyA, ...after.kv.onlyB]).not.toContain("tokenizer.ggml.pre");
    expect(after.tensors).toMatchObject({ onlyA: [], onlyB: [], changed: [] });
    const text = await cli(["diff", ollama, native]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^--- .*\n\+\+\+ .*\nKVs: \d+ only in A, \d+ only in B, \d+ changed/);
    expect(text.stdout).toMatch(/~ tokenizer\.ggml\.pre: STRING "default" -> STRING "llama-bpe"/);
    expect((await cli(["diff", out, out])).stdout).toMatch(/same KVs and tensors/);
  });
});

const needsLlama = () => {
  if (!llamaServer) throw new Error("llama-server not available: run scripts/build-llama-tools.sh");
  return { LLAMA_SERVER: llamaServer };
};

describe("verify (real llama-server)", () => {
  it("passes an Ollama vision blob: translated, loaded, a few tokens and one image answer", async () => {
    const r = await cli(["verify", vision], needsLlama());
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^ok {3}load in llama-server: http:\/\/127\.0\.0\.1:\d+/m);
    expect(r.stdout).toMatch(/^ok {3}generate: [1-9]\d* tokens/m);
    expect(r.stdout).toMatch(/^ok {3}image answer: [1-9]\d* image tokens/m);
    expect(r.stdout).toMatch(/PASS/);
  }, 300_000);

  it("fails with llama.cpp's own error text when the file is loaded untranslated", async () => {
    const r = await cli(["verify", vision, "--json"], { ...needsLlama(), OLLAMA_LLAMA_CPP_COMPAT: "0" });
    expect(r.code).toBe(1);
    const j = JSON.parse(r.stdout);
    expect(j.pass).toBe(false);
    expect(j.error).toMatch(/key not found in model: gemma3\.attention\.layer_norm_rms_epsilon/);
  }, 300_000);
});

describe("demo (real llama-server)", () => {
  it("ships its model as a file of its own: the built dist/demo-model.gguf is the testkit's gemma3 4b-vision Ollama fixture, byte for byte", async () => {
    const { arch, ...options } = DEMO_FIXTURE;
    const expected = await serializeGguf(generateFixture(arch, options).text);
    expect(Buffer.from(readFileSync(join(pkg, "dist", "demo-model.gguf"))).equals(Buffer.from(expected))).toBe(true);
    // and the shipped code does not reach for the unpublished testkit
    expect(readFileSync(join(pkg, "dist", "cli.cjs"), "utf8")).not.toMatch(/testkit|generateFixture/);
  });

  it("builds the tiny Ollama vision model, detects, translates and serves it: a text and an image answer", async () => {
    const r = await cli(["demo"], { ...needsLlama(), OLLAMA_MODELS: join(dir, "no-store") });
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/Ollama-format, supported \(gemma3\)/);
    expect(r.stdout).toMatch(/llama-server refused it: .*key not found in model/);
    expect(r.stdout).toMatch(/-> .*mmproj-gemma3-4b-vision\.gguf \(gemma3-clip/);
    expect(r.stdout).toMatch(/^text: {2}"Hello" -> .* \([1-9]\d* tokens\)$/m);
    expect(r.stdout).toMatch(/^image: .* \([1-9]\d* image tokens in the prompt\)$/m);
    expect(r.stdout).toMatch(/demo: ok/);
    expect(existsSync(join(dir, "no-store"))).toBe(false);
  }, 300_000);

  // llama.cpp logs from a worker thread that is not flushed at exit: a llama-server that fails
  // at once can print nothing at all (seen in CI). The exit is still its verdict on the file.
  it("a llama-server that exits 1 and prints nothing (its log lost at exit) still counts as refusing the Ollama file", async () => {
    const silent = join(dir, "silent-llama-server");
    writeFileSync(silent, "#!/bin/sh\nexit 1\n", { mode: 0o755 });
    const r = await cli(["demo", "--llama-server", silent]);
    expect(r.stdout).toMatch(/^llama-server refused it: exited with code 1 before it was ready \(its log was lost at exit\)$/m);
    expect(r.stdout).toMatch(/Ollama-format, supported \(gemma3\)/);
    // the translation is served by the same silent stand-in, so step 5 fails, saying why
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^ollama-compat: demo: llama-server did not start: .*exited \(1\) before it was ready/m);
  });

  it("when llama-server's log is lost once, a second try reports llama.cpp's reason", async () => {
    const flaky = join(dir, "flaky-llama-server");
    const count = join(dir, "flaky-count");
    // first start: silent exit; later starts: the error line llama.cpp prints for this file
    writeFileSync(
      flaky,
      `#!/bin/sh\nif [ -e "${count}" ]; then echo "llama_model_load: error loading model: key not found in model: x" >&2; else touch "${count}"; fi\nexit 1\n`,
      { mode: 0o755 },
    );
    const r = await cli(["demo", "--llama-server", flaky]);
    expect(r.stdout).toMatch(/^llama-server refused it: llama_model_load: error loading model: key not found in model: x$/m);
  });

  it("without llama-server: one line saying so, exit 1, nothing built", async () => {
    const r = await cli(["demo", "--llama-server", join(dir, "no-llama-server")]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^ollama-compat: .*no-llama-server/);
    expect(r.stdout).toBe("");
  });
});
