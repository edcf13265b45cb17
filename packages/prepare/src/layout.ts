import { parseModelName } from "@compat/store";

/**
 * How a folder of models is laid out for a front end: `models-dir` is llama-server's
 * `--models-dir` (router mode), `lmstudio` is LM Studio's models folder.
 */
export type ModelsLayout = "models-dir" | "lmstudio";

export const MODELS_LAYOUTS: readonly ModelsLayout[] = ["models-dir", "lmstudio"];

/** `gemma3:4b` -> `gemma3-4b`; `ns/model:tag` -> `ns-model-tag`: a file name every front end and file system takes. */
export function fileStem(name: string): string {
  return name.replace(/[:/\\]/g, "-").replace(/[^A-Za-z0-9._-]/g, "_");
}

/**
 * Where a model's files go, relative to the folder and `/`-separated. models-dir: a text-only
 * model is one `<stem>.gguf` at the top; a multimodal one is a folder `<stem>/` holding
 * `<stem>.gguf` and `mmproj-<stem>.gguf` (llama-server takes the file whose name starts with
 * "mmproj" as the projector). lmstudio: `<publisher>/<model>-<tag>/<stem>.gguf` (+ `mmproj-…`
 * beside it), the publisher being the Ollama namespace ("library" for official models).
 */
export function modelFiles(name: string, layout: ModelsLayout, multimodal: boolean): { model: string; mmproj: string } {
  if (layout === "lmstudio") {
    const n = parseModelName(name);
    const stem = fileStem(n ? `${n.model}-${n.tag}` : name.replace(/\.gguf$/i, ""));
    const dir = `${n ? fileStem(n.namespace) : "local"}/${stem}`;
    return { model: `${dir}/${stem}.gguf`, mmproj: `${dir}/mmproj-${stem}.gguf` };
  }
  const stem = fileStem(name);
  const dir = multimodal ? `${stem}/` : "";
  return { model: `${dir}${stem}.gguf`, mmproj: `${dir}mmproj-${stem}.gguf` };
}
