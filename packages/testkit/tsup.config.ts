import { defineConfig } from "tsup";

export default defineConfig({
  entry: ["src/index.ts"],
  format: ["esm", "cjs"],
  dts: true,
  clean: true,
  sourcemap: true,
  target: "node20",
  // import.meta.url (used to locate the harness scripts) also works in the CJS build.
  shims: true,
  external: [/^@compat\//],
});
