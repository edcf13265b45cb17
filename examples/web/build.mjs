// Bundles main.js (and the packages it imports, browser builds) into app.js next to index.html.
import { build } from "esbuild";
const here = new URL(".", import.meta.url).pathname;
await build({
  entryPoints: [`${here}main.js`],
  outfile: process.argv[2] ?? `${here}dist/app.js`,
  bundle: true,
  format: "esm",
  platform: "browser",
  minify: true,
  conditions: ["browser"],
  // resolve the packages as installed (their dist/), not through the repo's tsconfig paths to src/
  tsconfigRaw: "{}",
  logLevel: "warning",
});
