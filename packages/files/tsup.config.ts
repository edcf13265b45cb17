import { browserBuild, packageBuild } from "../../tsup.package";

export default [
  packageBuild(),
  // the browser condition's build: the platform-neutral part only (src/index.browser.ts)
  browserBuild([], { entry: { index: "src/index.browser.ts" } }),
];
