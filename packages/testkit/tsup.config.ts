import { packageBuild } from "../../tsup.package";

// import.meta.url (used to locate the harness scripts) also works in the CJS build.
export default packageBuild({ shims: true });
