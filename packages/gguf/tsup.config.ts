import type { Plugin } from "esbuild";
import { fileURLToPath } from "node:url";
import { packageBuild } from "../../tsup.package";

const browserIo = fileURLToPath(new URL("./src/node-io.browser.ts", import.meta.url));

/** The browser build swaps the Node file modules for stubs (package.json "browser" condition). */
const nodeIoForBrowser: Plugin = {
  name: "node-io-for-browser",
  setup(build) {
    build.onResolve({ filter: /^\.\/file-(source|sink)$/ }, () => ({ path: browserIo }));
  },
};

export default [
  // Two entries share one copy of the classes (instanceof holds across them), in CJS too.
  packageBuild({ entry: ["src/index.ts", "src/advanced.ts"], splitting: true }),
  packageBuild({
    format: ["esm"],
    outDir: "dist/browser",
    platform: "browser",
    target: "es2022",
    dts: false,
    splitting: false,
    clean: false,
    sourcemap: false,
    esbuildPlugins: [nodeIoForBrowser],
  }),
];
