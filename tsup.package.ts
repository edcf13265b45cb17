import { defineConfig, type Options } from "tsup";

/** The build every package shares: ESM + CJS + .d.ts for Node 20, sibling packages left external. */
export function packageBuild(overrides: Options = {}) {
  return defineConfig({
    entry: ["src/index.ts"],
    format: ["esm", "cjs"],
    dts: true,
    clean: true,
    sourcemap: true,
    target: "node20",
    external: [/^@compat\//],
    ...overrides,
  });
}
