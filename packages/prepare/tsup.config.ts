import { readFileSync } from "node:fs";
import { packageBuild } from "../../tsup.package";

// The translator's version is part of every cache key.
const { version } = JSON.parse(readFileSync(new URL("../handlers/package.json", import.meta.url), "utf8")) as { version: string };

export default packageBuild({ define: { __HANDLERS_VERSION__: JSON.stringify(version) } });
