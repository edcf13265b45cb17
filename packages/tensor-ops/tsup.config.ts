import type { Plugin } from "esbuild";
import { fileURLToPath } from "node:url";
import { packageBuild } from "../../tsup.package";

const browserLoader = fileURLToPath(new URL("./src/native-loader.browser.ts", import.meta.url));

/** The browser build has no addon loader (package.json "browser" condition). */
const noAddonInBrowser: Plugin = {
  name: "no-addon-in-browser",
  setup(build) {
    build.onResolve({ filter: /^\.\/native-loader$/ }, () => ({ path: browserLoader }));
  },
};

export default [
  // import.meta.url (used to locate the native addon) also works in the CJS build.
  packageBuild({ shims: true }),
  packageBuild({
    format: ["esm"],
    outDir: "dist/browser",
    platform: "browser",
    target: "es2022",
    dts: false,
    splitting: false,
    clean: false,
    sourcemap: false,
    esbuildPlugins: [noAddonInBrowser],
  }),
];
