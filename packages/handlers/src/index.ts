// The engine (translate a model with a handler registry), the Translation verbs handlers are
// written in, the derived ops and lenient reads they share, and the text-side registry.
export { translate, translateModel, detectHandlers, resolveProfile, type TranslateOptions } from "./translate";
export { TranslatedView } from "./view";
export {
  Translation,
  TRANSLATION_PROFILES,
  type OpInput,
  type OpSpec,
  type OpRecord,
  type FixSpec,
  type FixRecord,
  type TranslationProfile,
} from "./translation";
export { promoteF16ToF32, permuteQKRows, rowAsF32Tensor, concatTensors, joinQkv } from "./ops";
export {
  stringKv,
  boolKv,
  u32Kv,
  arrayKv,
  stringArrayKv,
  u32ArrayKv,
  intArrayKv,
  missingOrDefault,
  tokenAt,
  tensorNames,
  hasTensorPrefix,
  hasTensorSuffix,
  blocksWithTensors,
} from "./reads";
export { anyOf, kvMarkers } from "./markers";
export { formatReport, type TranslationReport } from "./report";
export { textHandlers } from "./registry";
export { gatesOn, type Handler } from "./handler";
export { compatEnabled } from "./env";
export { TranslationError, type TranslationErrorCode } from "./errors";
