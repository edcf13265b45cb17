import { readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Script } from "node:vm";

/** dist/cli.cjs (the command line in one CommonJS bundle) and its V8 code cache, beside dist/bin.js. */
export const CLI_BUNDLE = "cli.cjs";
export const CODE_CACHE = "cli.cjs.cache";

/**
 * Compiles and runs the CommonJS bundle `file` as Node's own loader would (the same wrapper and
 * arguments), with V8 `cachedData` when given. The build (which makes the cache) and the binary
 * (which takes it) both go through here, so V8 sees the same source string in both.
 */
export function loadBundle(file: string, cachedData?: Buffer): { exports: unknown; script: Script } {
  const source = readFileSync(file, "utf8");
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, {
    filename: file,
    ...(cachedData !== undefined ? { cachedData } : {}),
  });
  const module = { exports: {} as unknown };
  const run = script.runInThisContext() as (e: unknown, r: NodeJS.Require, m: typeof module, f: string, d: string) => void;
  run.call(module.exports, module.exports, createRequire(file), module, file, dirname(file));
  return { exports: module.exports, script };
}

/**
 * The code cache beside the bundle, or undefined: not built, unreadable, or older than the bundle
 * (rebuilt without the cache step). V8 checks a cache against the source's length only, so a stale
 * one must never reach it. An installed package's files all carry the same time: the pair is used.
 */
export function readCodeCache(dir: string): Buffer | undefined {
  try {
    const cache = join(dir, CODE_CACHE);
    if (statSync(cache).mtimeMs < statSync(join(dir, CLI_BUNDLE)).mtimeMs) return undefined;
    return readFileSync(cache);
  } catch {
    return undefined;
  }
}
