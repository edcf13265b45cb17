export { FuseMount, type MountOptions, type MountExit } from "./mount";
export { planView, type FilePlan, type Extent, type SourceFile, type Sidecar, type ComputedPart, type PlannableView, type PlanOptions } from "./plan";
export { SidecarStore, SIDECAR_DIGEST_BYTES, type SidecarCheck } from "./sidecar";
export { fuseSupport, type FuseSupport } from "./daemon";
export { MountError, type MountErrorCode } from "./errors";
export { writeErofsImage, erofsChunks, wholeFilePlan, EROFS_BLOCK, EROFS_CHUNK, type ErofsFile, type ErofsImage } from "./erofs";
export { mountErofs, erofsSupport, probeErofs, erofsMountFolder, sweepErofsMounts, EROFS_READ_AHEAD_KB, type ErofsMount, type ErofsSupport } from "./erofs-mount";
