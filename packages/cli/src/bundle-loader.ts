import { isAscii } from "node:buffer";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Script } from "node:vm";

/** dist/cli.cjs (the command line in one CommonJS bundle) and its V8 code cache, beside dist/bin.cjs. */
export const CLI_BUNDLE = "cli.cjs";
export const CODE_CACHE = "cli.cjs.cache";

/**
 * The bundle's last lines name its build (a fresh id per tsup run); the cache file starts with
 * the id of the bundle it was made from. V8 checks a cache against the source's length only, so
 * a cache from another build (a bundle rebuilt without the cache step) must never reach it.
 */
const BUILD_MARK = "// ollama-compat build ";

/** The build id in the bundle's source, or undefined. */
function buildIdOf(source: string): string | undefined {
  const at = source.lastIndexOf("\n" + BUILD_MARK);
  if (at < 0) return undefined;
  const start = at + 1 + BUILD_MARK.length;
  const end = source.indexOf("\n", start);
  return source.slice(start, end < 0 ? undefined : end).trim();
}

/** A cache file's bytes: the bundle's build id, a newline, then V8's cached data. */
export function codeCacheFile(buildId: string, cachedData: Buffer): Buffer {
  return Buffer.concat([Buffer.from(buildId + "\n"), cachedData]);
}

/**
 * Compiles and runs the CommonJS bundle `file` as Node's own loader would (the same wrapper and
 * arguments), with the V8 code cache in `cacheFile` when that was made from this very build. The
 * build (which makes the cache) and the binary (which takes it) both go through here, so V8
 * sees the same source string in both.
 */
export function loadBundle(file: string, cacheFile?: Buffer): { exports: unknown; script: Script; buildId: string | undefined; cached: boolean } {
  // The bundle is ASCII (scripts/code-cache.ts refuses to cache another): read as Latin-1 it is
  // the same string without decoding UTF-8, a few ms of every start. Any other file is decoded.
  const bytes = readFileSync(file);
  const source = isAscii(bytes) ? bytes.toString("latin1") : bytes.toString("utf8");
  const buildId = buildIdOf(source);
  const head = buildId !== undefined ? Buffer.from(buildId + "\n") : undefined;
  const cachedData = head !== undefined && cacheFile !== undefined && cacheFile.subarray(0, head.length).equals(head) ? cacheFile.subarray(head.length) : undefined;
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, {
    filename: file,
    ...(cachedData !== undefined ? { cachedData } : {}),
  });
  const module = { exports: {} as unknown };
  const run = script.runInThisContext() as (e: unknown, r: NodeJS.Require, m: typeof module, f: string, d: string) => void;
  run.call(module.exports, module.exports, createRequire(file), module, file, dirname(file));
  return { exports: module.exports, script, buildId, cached: cachedData !== undefined && script.cachedDataRejected !== true };
}

/** The code cache file beside the bundle, or undefined (not built, or unreadable: the bundle is compiled without it). */
export function readCodeCache(dir: string): Buffer | undefined {
  try {
    return readFileSync(join(dir, CODE_CACHE));
  } catch {
    return undefined;
  }
}
