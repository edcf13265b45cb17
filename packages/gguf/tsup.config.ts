import { packageBuild } from "../../tsup.package";

// Two entries share one copy of the classes (instanceof holds across them), in CJS too.
export default packageBuild({ entry: ["src/index.ts", "src/advanced.ts"], splitting: true });
