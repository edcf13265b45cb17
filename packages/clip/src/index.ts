export { clipView, clipViewModel, clipArchitectures, hasClipHandler, type ClipViewOptions } from "./view";
export { clipHandlers } from "./registry";
export { MMPROJ_TENSOR_PREFIXES, MMPROJ_KEY_PREFIXES } from "./tower";
