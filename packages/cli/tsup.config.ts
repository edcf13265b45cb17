import { readFileSync } from "node:fs";
import { packageBuild } from "../../tsup.package";

const { version } = JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8")) as { version: string };

export default packageBuild({
  entry: ["src/index.ts", "src/bin.ts"],
  // types only for the library entry: bin.ts (and the demo's bundled fixture generator) have no public types
  dts: { entry: "src/index.ts" },
  define: { __CLI_VERSION__: JSON.stringify(version) },
});
