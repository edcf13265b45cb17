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

/**
 * The `browser` export condition's build (dist/browser/index.js, ESM only): each relative
 * import matching a pattern of `stubs` resolves to its browser module instead, so Node-only
 * modules never reach a bundle.
 */
export function browserBuild(stubs: ReadonlyArray<[RegExp, string]>, overrides: Options = {}) {
  return packageBuild({
    format: ["esm"],
    outDir: "dist/browser",
    platform: "browser",
    target: "es2022",
    dts: false,
    splitting: false,
    clean: false,
    sourcemap: false,
    esbuildPlugins: [
      {
        name: "browser-stubs",
        setup(build) {
          for (const [swap, stub] of stubs) build.onResolve({ filter: swap }, () => ({ path: stub }));
        },
      },
    ],
    ...overrides,
  });
}
