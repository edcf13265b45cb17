// The everyday surface: read, parse, edit (GgufModel), write, errors, the ggml type table.
// Implementation classes (array kinds, tensor checks) are in "@compat/gguf/advanced".
export * from "./types";
export { GgufError, type GgufErrorCode, type GgufErrorDetails } from "./errors";
export {
  GgmlType,
  GGML_TYPE_COUNT,
  ggmlTypeInfo,
  ggmlTypeName,
  ggmlTypeFromName,
  isKnownGgmlType,
  allGgmlTypes,
  elementCount,
  tensorByteSize,
  type GgmlTypeInfo,
} from "./ggml-types";
export { GgufKeys, archKey, fileTypeName, GGUF_DEFAULT_ALIGNMENT } from "./keys";
export { ggufArray, isGgufArray, valueTypeName, type ArrayInput } from "./arrays";
export { bufferSource, blobSource } from "./sources";
export { fileSource } from "./node-lazy";
export { GgufModel, type CreateModelOptions, type GgufModelInit } from "./model";
export { readGguf, parseGguf, type ReadOptions, type ParseOptions, type GgufInput } from "./read";
export type { StringWalk } from "./parse";
export { layoutGguf, extentsCovering, PADDING_KEY, SHARE_BLOCK, type GgufLayout, type LayoutExtent, type LayoutOptions } from "./layout";
export { writeGguf, serializeGguf, type WriteTarget, type WriteOptions, type WriteResult, type GgufSink } from "./writer";
export { readTensorData } from "./tensor-data";
export { planStream, StreamWriter, ArrivingSource, type StreamPlan, type StreamOutput, type StreamSink } from "./stream-writer";
export { summarize, type GgufSummary } from "./summary";
