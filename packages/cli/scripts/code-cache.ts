/**
 * Build step after tsup: writes dist/cli.cjs.cache, the V8 code cache dist/bin.cjs hands to V8
 * with dist/cli.cjs. The bundle is loaded exactly as the binary loads it (src/bundle-loader.ts),
 * then the common commands run in this process on the demo's Ollama gemma3 vision file (--help,
 * inspect, detect, translate --dry-run and a real translate) and `serve --all` starts twice over
 * a store that holds it, so the cache holds the functions they compile, not just the top level
 * (a serve --all start compiles about 7 ms of functions that would otherwise be compiled at every
 * start). The file starts with the bundle's build id (a cache from another build is never used);
 * V8 itself rejects a cache from another V8 version or flags.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CLI_BUNDLE, CODE_CACHE, codeCacheFile, loadBundle } from "../src/bundle-loader";
import { buildOllamaStore } from "@compat/store";
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
  await serveAllStarts(runCli, file, tmp);
  writeFileSync(join(dist, CODE_CACHE), codeCacheFile(buildId, script.createCachedData()));
} finally {
  rmSync(tmp, { recursive: true, force: true });
}

/**
 * `serve --all` started over a store holding the demo's file, as a user starts it and then starts
 * it again (the second start plans from the facts the first recorded), each up to its ready line,
 * then a client's first calls and SIGTERM. llama-server is scripts/router-stand-in.mjs (the build
 * has none), and the mount is left out (a build may have no FUSE): its models go to the cache.
 */
async function serveAllStarts(runCli: (argv: string[], io: CliIo) => Promise<number>, model: string, tmp: string): Promise<void> {
  const store = join(tmp, "store");
  await buildOllamaStore(store, [{ name: "demo:latest", model }]);
  const standIn = fileURLToPath(new URL("./router-stand-in.mjs", import.meta.url));
  chmodSync(standIn, 0o755);
  // no mount daemon: the store is served from the translation cache, without FUSE
  const env = { ...process.env, OLLAMA_HOST: "127.0.0.1:0", OLLAMA_COMPAT_MOUNTD: join(tmp, "no-mountd") };
  for (let start = 0; start < 2; start++) {
    const said: string[] = [];
    let url: string | undefined;
    const io: CliIo = {
      out: (s) => (url ??= /^(http:\/\/\S+)$/m.exec(s)?.[1]),
      err: (s) => {
        said.push(s);
        if (!s.includes("Ollama API ready")) return;
        // a client's first calls, then the signal a user stops it with
        void (async () => {
          for (const path of ["/api/version", "/api/tags"]) await fetch(`${url}${path}`).then((r) => r.text());
          process.emit("SIGTERM", "SIGTERM");
        })();
      },
      env,
    };
    const argv = ["serve", "--all", "--models", store, "--cache-dir", join(tmp, "cache"), "--llama-server", standIn];
    const code = await runCli(argv, io);
    if (code !== 143 || !said.some((s) => s.includes("Ollama API ready"))) throw new Error(`code cache warm-up: ollama-compat ${argv.join(" ")} exited ${code}:\n${said.join("")}`);
  }
}
