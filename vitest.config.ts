import { defineConfig } from "vitest/config";
import { fileURLToPath } from "node:url";

const pkg = (name: string) => fileURLToPath(new URL(`./packages/${name}/src/index.ts`, import.meta.url));

// Tests run against the TypeScript sources, so no build is needed before `npm test`.
// Subpaths come before their package: an alias also matches "<key>/…".
export const compatAliases = {
  "@compat/gguf/advanced": fileURLToPath(new URL("./packages/gguf/src/advanced.ts", import.meta.url)),
  "@compat/gguf": pkg("gguf"),
  "@compat/tensor-ops": pkg("tensor-ops"),
  "@compat/handlers": pkg("handlers"),
  "@compat/clip": pkg("clip"),
  "@compat/views": pkg("views"),
  "@compat/cli": pkg("cli"),
  "@compat/files": pkg("files"),
  "@compat/store": pkg("store"),
  "@compat/prepare": pkg("prepare"),
  "@compat/server-bridge": pkg("server-bridge"),
  "@compat/ollama-api": pkg("ollama-api"),
  "@compat/mount": pkg("mount"),
  "@compat/testkit": pkg("testkit"),
  "@compat/fuzz": pkg("fuzz"),
};

export default defineConfig({
  resolve: { alias: compatAliases },
  test: {
    include: ["packages/*/test/**/*.test.ts", "examples/*/test/**/*.test.ts"],
    // Many tests run real processes (llama-server, the CLI, FUSE mounts). Loaded, such a test
    // stretches about 20x (a 2 s mount test took 38-41 s with four copies pinned to one core),
    // so a tight default bound would fail runs for the machine's load, not for the code.
    testTimeout: 300_000,
    hookTimeout: 600_000,
    pool: "forks",
  },
});
