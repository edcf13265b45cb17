import { fileURLToPath } from "node:url";
import { browserBuild, packageBuild } from "../../tsup.package";

export default [
  // import.meta.url (used to locate the native addon) also works in the CJS build.
  packageBuild({ shims: true }),
  // The browser build has no addon loader (package.json "browser" condition).
  browserBuild(/^\.\/native-loader$/, fileURLToPath(new URL("./src/native-loader.browser.ts", import.meta.url))),
];
