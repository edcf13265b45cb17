import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { TestkitError } from "./errors";

let cached: string | undefined;

/**
 * The testkit package directory, found by walking up from this module (it runs
 * from src/ under vitest and from dist/ when built), so helper scripts and the
 * repo's scripts/ can be located without relying on the working directory.
 */
export function testkitRoot(): string {
  if (cached) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, "package.json");
    if (existsSync(manifest)) {
      const { name } = JSON.parse(readFileSync(manifest, "utf8")) as { name?: string };
      if (name === "@compat/testkit") return (cached = dir);
    }
    const parent = dirname(dir);
    if (parent === dir) throw new TestkitError("NO_PACKAGE_ROOT", "testkit: cannot find the @compat/testkit package root");
    dir = parent;
  }
}

/** The monorepo root (two levels above the package). */
export function repoRoot(): string {
  return join(testkitRoot(), "..", "..");
}
