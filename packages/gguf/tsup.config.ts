import { fileURLToPath } from "node:url";
import { browserBuild, packageBuild } from "../../tsup.package";

export default [
  // Two entries share one copy of the classes (instanceof holds across them), in CJS too.
  packageBuild({ entry: ["src/index.ts", "src/advanced.ts"], splitting: true }),
  // The browser build swaps the Node file modules (its own file-source, @compat/files' atomic
  // writes) for stubs (package.json "browser" condition); @compat/files is bundled so the swap applies.
  browserBuild([[/^(\.\/file-source|@compat\/files)$/, fileURLToPath(new URL("./src/node-io.browser.ts", import.meta.url))]], { noExternal: ["@compat/files"] }),
];
