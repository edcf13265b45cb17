import { packageBuild } from "../../tsup.package";

// import.meta.url (used to find the daemon beside the package) also works in the CJS build.
export default packageBuild({ shims: true });
