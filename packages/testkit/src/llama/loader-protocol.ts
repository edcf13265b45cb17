/** Prefix of the one stdout line on which the loader child reports its result. */
export const LOADER_RESULT_MARKER = "@@compat-loader-result@@";
