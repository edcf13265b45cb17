// The `browser` export condition's entry: only what runs without a file system. A web bundle
// of @compat/handlers reaches this package through its views' range copier; in a browser there
// is no kernel call (@compat/tensor-ops' nativeFileCopy() is undefined there), so
// kernelRangeCopier returns undefined and writers fall back. Everything else here needs Node's
// fs, and a bundle that imports it fails at build time (no such export) instead of at run time.
export { kernelRangeCopier, type KernelCopy } from "./file-copy";
export { FilesError, type FilesErrorCode } from "./errors";
