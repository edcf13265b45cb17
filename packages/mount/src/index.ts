export { FuseMount, type MountOptions, type MountExit } from "./mount";
export { planView, type FilePlan, type Extent, type SourceFile, type Sidecar, type ComputedPart, type PlannableView, type PlanOptions } from "./plan";
export { SidecarStore, SIDECAR_DIGEST_BYTES, type SidecarCheck } from "./sidecar";
export { fuseSupport, daemonPath, DAEMON_NAME, type FuseSupport } from "./daemon";
export { mountState, mountAt, detachMount, FS_TYPE, type MountEntry } from "./mounts";
export { MountError, type MountErrorCode } from "./errors";
