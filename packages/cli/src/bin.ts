#!/usr/bin/env node
/**
 * The `ollama-compat` binary (dist/bin.cjs): a small loader for dist/cli.cjs, the whole command
 * line in one CommonJS bundle (dependencies inlined; each command's code is initialised only when
 * it runs). The loader is CommonJS too: an ES module entry would start Node's ESM loader (about
 * 4 ms of start-up) for nothing.
 * One file: no module resolution per import. CommonJS through vm.Script: V8 takes the code cache
 * the build wrote beside it (scripts/code-cache.ts), so what it holds is neither parsed nor
 * compiled again. V8 rejects a cache from another V8 version or other flags, and the bundle is
 * then compiled as usual: the cache can only save time.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { CLI_BUNDLE, loadBundle, readCodeCache } from "./bundle-loader";

// __dirname exists in the built dist/bin.cjs; run from source through tsx, this is an ES module.
const dir = typeof __dirname === "string" ? __dirname : undefined;
if (dir !== undefined && existsSync(join(dir, CLI_BUNDLE))) {
  (loadBundle(join(dir, CLI_BUNDLE), readCodeCache(dir)).exports as { main(): void }).main();
} else {
  // run from source (src/bin.ts through tsx, as the tests do): no bundle, the modules themselves;
  // the specifier is a variable so that the build leaves it out of dist/bin.cjs
  const source = "./main.ts";
  void import(source).then((m: { main(): void }) => m.main());
}
