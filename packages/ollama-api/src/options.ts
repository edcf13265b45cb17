import { badRequest } from "./errors";

/**
 * Ollama's request-time options (api.Options) and the llama-server request field each one
 * sets. Ollama sends all of them with every completion (llm/llama_server.go); the values start
 * from api.DefaultOptions, then the model's params layer, then the request's `options`.
 */
const SAMPLING_FIELDS: ReadonlyArray<readonly [option: string, field: string, kind: "int" | "float"]> = [
  ["num_predict", "n_predict", "int"],
  ["num_keep", "n_keep", "int"],
  ["temperature", "temperature", "float"],
  ["top_k", "top_k", "int"],
  ["top_p", "top_p", "float"],
  ["min_p", "min_p", "float"],
  ["typical_p", "typical_p", "float"],
  ["repeat_last_n", "repeat_last_n", "int"],
  ["repeat_penalty", "repeat_penalty", "float"],
  ["presence_penalty", "presence_penalty", "float"],
  ["frequency_penalty", "frequency_penalty", "float"],
  ["seed", "seed", "int"],
  ["mirostat", "mirostat", "int"],
  ["mirostat_tau", "mirostat_tau", "float"],
  ["mirostat_eta", "mirostat_eta", "float"],
];

/** api.DefaultOptions, the request-time part; min_p is 0 there (unset), and Ollama sends it all the same. */
const DEFAULTS: Readonly<Record<string, number>> = {
  num_predict: -1,
  num_keep: 4,
  temperature: 0.8,
  top_k: 40,
  top_p: 0.9,
  min_p: 0,
  typical_p: 1,
  repeat_last_n: 64,
  repeat_penalty: 1,
  presence_penalty: 0,
  frequency_penalty: 0,
  seed: -1,
};

/**
 * The llama-server sampling fields of one request: defaults, then the model's params layer,
 * then the request's options. A value of the wrong type is a 400, as in Ollama's Options.FromMap.
 * Options fixed when a model loads (num_ctx, num_batch, num_thread, …: api.Runner) are not
 * sampling fields: they choose the configuration the model is loaded in (load-config.ts).
 */
export function samplingFields(params: Record<string, unknown>, requestOptions: unknown): Record<string, unknown> {
  if (requestOptions !== undefined && requestOptions !== null && (typeof requestOptions !== "object" || Array.isArray(requestOptions))) {
    throw badRequest("options: expected an object");
  }
  const merged: Record<string, unknown> = { ...DEFAULTS, ...params, ...(requestOptions as Record<string, unknown> | undefined) };
  const out: Record<string, unknown> = {};
  for (const [option, field, kind] of SAMPLING_FIELDS) {
    const v = merged[option];
    if (v === undefined || v === null) continue;
    if (typeof v !== "number" || !Number.isFinite(v)) throw badRequest(`option "${option}" must be of type ${kind === "int" ? "integer" : "float32"}`);
    out[field] = kind === "int" ? Math.trunc(v) : v;
  }
  const stop = stopWords(merged.stop);
  if (stop.length > 0) out.stop = stop;
  return out;
}

/** A params-layer or request `stop`: a string or an array of strings. */
export function stopWords(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  if (typeof v === "string") return [v];
  if (Array.isArray(v) && v.every((s) => typeof s === "string")) return v as string[];
  throw badRequest(`option "stop" must be of an array of strings`);
}
