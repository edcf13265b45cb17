export { translate, translateModel, detectHandlers, resolveProfile, type TranslateOptions } from "./translate";
export { TranslatedView } from "./view";
export {
  Translation,
  readTensorBytes,
  TRANSLATION_PROFILES,
  type OpInput,
  type OpSpec,
  type OpRecord,
  type FixSpec,
  type FixRecord,
  type TranslationProfile,
} from "./translation";
export { buildReport, changesNothing, formatReport, sameKv, type TranslationReport } from "./report";
export { textHandlers } from "./registry";
export { gatesOn, type Handler } from "./handler";
export { compatEnabled } from "./env";
export { TranslationError } from "./errors";
export * as detect from "./detect";
