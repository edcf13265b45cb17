export { buildFuzzCorpus, pickEntry, type CorpusEntry, type CorpusOptions } from "./corpus";
export { scanHeader, FIELD_KINDS, type HeaderMap, type FieldKind, type FieldPos } from "./scan";
export { fuzzInput, type FuzzInput } from "./mutate";
export { FuzzFailure, isTypedError, parseOnly, fullPipeline, type Outcome, type PipelineOptions } from "./target";
export { runFuzz, type FuzzOptions, type FuzzStats, type FuzzFailureRecord } from "./run";
