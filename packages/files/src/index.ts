export { FilesError, type FilesErrorCode, type FilesErrorDetails } from "./errors";
export { writeFileAtomic, replaceAtomically, sweepTempFiles, tempPathFor, type AtomicFileOutput, type AtomicFileContent, type AtomicFileOptions, DIRECT_MIN, type RangeCopier } from "./atomic-file";
export { pendingTempFiles, processAlive, tempFileOwner, trackTempFile, untrackTempFile } from "./temp-files";
export { ownedTempDir, processState, thisProcess, type ProcessIdentity, type ProcessState } from "./owner";
export { acquireLock, lockedByLive, type LockOptions } from "./entry-lock";
export { isSystemError, whyNotWritable } from "./fs-errors";
export { runNativeBuild, type NativeTarget } from "./native-build";
export { kernelRangeCopier, type KernelCopy } from "./file-copy";
export { fileKind, readSmallFile } from "./small-file";
