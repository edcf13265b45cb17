import { fileURLToPath } from "node:url";
import { browserBuild, packageBuild } from "../../tsup.package";

export default [
  // Two entries share one copy of the classes (instanceof holds across them), in CJS too.
  packageBuild({ entry: ["src/index.ts", "src/advanced.ts"], splitting: true }),
  // The browser build swaps the Node file modules for stubs (package.json "browser" condition).
  browserBuild([[/^\.\/(file-source|atomic-file)$/, fileURLToPath(new URL("./src/node-io.browser.ts", import.meta.url))]]),
];
