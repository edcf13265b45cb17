/**
 * Build step after tsup: writes dist/cli.cjs.cache, the V8 code cache dist/bin.cjs hands to V8
 * with dist/cli.cjs. The bundle is loaded exactly as the binary loads it (src/bundle-loader.ts),
 * then the common commands run in this process on the demo's Ollama gemma3 vision file (--help,
 * inspect, detect, translate --dry-run and a real translate), so the cache holds the functions
 * they compile, not just the top level. The file starts with the bundle's build id (a cache from
 * another build is never used); V8 itself rejects a cache from another V8 version or flags.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CLI_BUNDLE, CODE_CACHE, codeCacheFile, loadBundle } from "../src/bundle-loader";
import { demoModelPath } from "../src/demo-fixture";
import type { CliIo } from "../src/io";

const dist = fileURLToPath(new URL("../dist/", import.meta.url));
// One non-ASCII character makes V8 hold the whole bundle as a two-byte string, decoded from UTF-8
// and hashed at every start (twice the bytes, about 20 ms on a loaded machine). esbuild escapes
// strings and templates but copies regular expression literals as written: escape those in the source.
const nonAscii = /[^\x00-\x7f]/.exec(readFileSync(join(dist, CLI_BUNDLE), "latin1"));
if (nonAscii !== null) {
  const at = nonAscii.index;
  throw new Error(`${CLI_BUNDLE} is not ASCII at byte ${at} ("${readFileSync(join(dist, CLI_BUNDLE)).subarray(Math.max(0, at - 40), at + 20).toString("utf8")}"): write the character as an escape (\\u00b5) in its source`);
}
const { exports, script, buildId } = loadBundle(join(dist, CLI_BUNDLE));
if (buildId === undefined) throw new Error(`${CLI_BUNDLE} has no build id (tsup.config.ts writes it)`);
const { runCli } = exports as { runCli(argv: string[], io: CliIo): Promise<number> };

const tmp = mkdtempSync(join(tmpdir(), "ollama-compat-code-cache-"));
try {
  // the model the build just wrote for `demo` (scripts/demo-model.ts): an Ollama gemma3 vision blob
  const file = demoModelPath();
  const io: CliIo = { out: () => {}, err: () => {}, env: {} };
  const runs = [
    ["--help"],
    ["inspect", file],
    ["inspect", file, "--json"],
    ["detect", file],
    ["detect", file, "--json"],
    ["translate", file, "--dry-run"],
    ["translate", file, "--dry-run", "--json"],
    ["translate", file, "-o", join(tmp, "out.gguf"), "-q"],
  ];
  for (const argv of runs) {
    const code = await runCli(argv, io);
    if (code !== 0) throw new Error(`code cache warm-up: ollama-compat ${argv.join(" ")} exited ${code}`);
  }
  writeFileSync(join(dist, CODE_CACHE), codeCacheFile(buildId, script.createCachedData()));
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
