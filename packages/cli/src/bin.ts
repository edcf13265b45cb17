#!/usr/bin/env node
/**
 * The `ollama-compat` binary: a small loader for dist/cli.cjs, the whole command line in one
 * CommonJS bundle (dependencies inlined; each command's code is initialised only when it runs).
 * One file: no module resolution per import. CommonJS through vm.Script: V8 takes the code cache
 * the build wrote beside it (scripts/code-cache.ts), so what it holds is neither parsed nor
 * compiled again. V8 rejects a cache from another V8 version or other flags, and the bundle is
 * then compiled as usual: the cache can only save time.
 */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CLI_BUNDLE, loadBundle, readCodeCache } from "./bundle-loader";

const dir = dirname(fileURLToPath(import.meta.url));
if (existsSync(join(dir, CLI_BUNDLE))) {
  (loadBundle(join(dir, CLI_BUNDLE), readCodeCache(dir)).exports as { main(): void }).main();
} else {
  // run from source (src/bin.ts through tsx, as the tests do): no bundle, the modules themselves;
  // the specifier is a variable so that the build leaves it out of dist/bin.js
  const source = "./main.ts";
  ((await import(source)) as { main(): void }).main();
}
