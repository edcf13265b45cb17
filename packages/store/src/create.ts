/**
 * `ollama create` from a model already in the store (server/create.go CreateHandler with `from`):
 * a new manifest that reuses the source's layers, with the template, system, params, messages and
 * license layers replaced or added, an adapter from a blob of the store, and a config blob, each
 * JSON blob byte for byte as Ollama's Go encoder writes it. Blobs and the manifest go through
 * store-write (staged, fsynced, renamed), so no name ever points at a half-written file.
 *
 * Not here: create from uploaded files (GGUF or safetensors conversion) and quantization, which
 * need Ollama's converter and quantizer.
 */
import { readFile, stat } from "node:fs/promises";
import { fileTypeName, GgufKeys, readGguf, summarize } from "@compat/gguf";
import { canonicalDigest } from "./digest";
import { StoreError } from "./errors";
import { MediaType } from "./media-types";
import { displayName, type ModelName } from "./name";
import { addBlobBytes, blobPathIn, manifestDigests, manifestPathIn, readInstalledManifest, removeUnreferenced, writeModelManifest } from "./store-write";

/** A create request as Ollama's API takes it (api.CreateRequest), the fields this supports. */
export interface CreateSpec {
  /** The model to write. */
  name: ModelName;
  /** The model whose layers it starts from (must be in the store). */
  from: ModelName;
  template?: string;
  system?: string;
  /** One license or several; each becomes a layer of its own, after the source's. */
  license?: string | string[];
  /** Merged over the source's params layer (a key given here wins), as Ollama's setParameters. */
  parameters?: Record<string, unknown>;
  /** Replaces the source's messages layer when not empty. */
  messages?: ReadonlyArray<Record<string, unknown>>;
  /** File name → `sha256:<hex>` of a blob in the store: one GGUF LoRA adapter. */
  adapters?: Record<string, string>;
}

export interface CreateOptions {
  /** Ollama's progress objects: `using existing layer …`, `creating new layer …`, `writing manifest`. */
  onProgress?: (p: { status: string }) => void;
  /** Blobs a running server still reads: a replaced version's are kept while this says so. */
  keep?: (digest: string) => boolean;
  /** OLLAMA_NOPRUNE set: the layers of a replaced version are kept. */
  env?: Record<string, string | undefined>;
}

export interface CreatedModel {
  manifestPath: string;
  /** Digests of the replaced version's blobs that were removed (nothing else names them). */
  removed: string[];
}

/** A manifest layer as Ollama's manifest.Layer marshals it (field order is the struct's). */
interface Layer {
  mediaType: string;
  digest: string;
  size: number;
  from?: string;
  name?: string;
}

/** What create.go's createModel puts into the config blob (model.ConfigV2), in the struct's order. */
interface ConfigV2 {
  model_format: string;
  model_family: string;
  model_families: string[] | null;
  model_type: string;
  file_type: string;
  renderer?: string;
  parser?: string;
  requires?: string;
  capabilities?: string[];
  draft?: { model_format?: string; architecture?: string };
  architecture: string;
  os: string;
}

/** Writes `spec.name` from `spec.from` as Ollama's CreateHandler does; the replaced version's unused blobs go. */
export async function createModel(root: string, spec: CreateSpec, opts: CreateOptions = {}): Promise<CreatedModel> {
  const report = opts.onProgress ?? (() => undefined);
  const source = await readManifest(root, spec.from);
  const before = await manifestDigests(manifestPathIn(root, spec.name));
  const fromName = displayName(spec.from);
  const statuses = new Map<Layer, string>();
  let layers: Layer[] = [];
  for (const l of source.layers) {
    const size = await blobSize(root, l.digest, `layer ${l.digest} (${l.mediaType}) of ${fromName}`);
    const layer: Layer = { mediaType: l.mediaType, digest: l.digest, size, from: fromName, ...(l.name ? { name: l.name } : {}) };
    statuses.set(layer, `using existing layer ${l.digest}`);
    layers.push(layer);
  }

  const config: ConfigV2 = { model_format: "", model_family: "", model_families: null, model_type: "", file_type: "", architecture: "amd64", os: "linux" };
  const base = await readConfig(root, source.config?.digest);
  for (const k of ["renderer", "parser", "requires", "model_format"] as const) if (typeof base[k] === "string" && base[k] !== "") config[k] = base[k] as string;
  if (Array.isArray(base.capabilities) && base.capabilities.length > 0) config.capabilities = base.capabilities.filter((c): c is string => typeof c === "string");

  if (spec.adapters !== undefined && Object.keys(spec.adapters).length > 0) {
    for (const layer of await adapterLayers(root, spec.adapters, report)) {
      statuses.set(layer, `using existing layer ${layer.digest}`);
      layers.push(layer);
    }
  }

  const parameters = { ...(spec.parameters ?? {}) };
  for (const l of layers) {
    if (l.mediaType !== MediaType.model && l.mediaType !== MediaType.draft) continue;
    const facts = await ggufFacts(blobPathIn(root, l.digest), `layer ${l.digest} (${l.mediaType})`);
    if (l.mediaType === MediaType.draft) {
      config.draft = { model_format: "gguf", ...(facts.arch ? { architecture: facts.arch } : {}) };
      continue;
    }
    config.model_format ||= "gguf";
    config.model_family ||= facts.arch;
    config.model_type ||= humanNumber(facts.parameterCount);
    config.file_type ||= facts.fileType;
    config.model_families = [...(config.model_families ?? []), facts.arch];
    // the renderer and parser Ollama picks by architecture when the source's config names none
    if (!config.renderer || !config.parser) {
      const [renderer, parser] = ARCH_RENDERERS[facts.arch] ?? [];
      if (renderer) config.renderer ||= renderer;
      if (parser) config.parser ||= parser;
      if (facts.arch === "gemma4" && !("stop" in parameters)) parameters.stop = ["<turn|>"];
    }
  }

  const add = async (mediaType: string, bytes: string) => {
    const blob = await addBlobBytes(root, bytes);
    const layer: Layer = { mediaType, digest: blob.digest, size: blob.size };
    statuses.set(layer, `${blob.created ? "creating new layer" : "using existing layer"} ${blob.digest}`);
    layers.push(layer);
  };
  const without = (mediaType: string) => (layers = layers.filter((l) => l.mediaType !== mediaType));

  if (spec.template) {
    without(MediaType.template);
    await add(MediaType.template, spec.template);
  }
  if (spec.system) {
    without(MediaType.system);
    await add(MediaType.system, spec.system);
  }
  for (const l of typeof spec.license === "string" ? (spec.license ? [spec.license] : []) : (spec.license ?? [])) await add(MediaType.license, l);

  // params: the request's keys, then each old params layer's keys the request does not set
  for (const l of layers.filter((x) => x.mediaType === MediaType.params)) {
    const old = await readJsonBlob(root, l.digest, `params layer ${l.digest} of ${fromName}`);
    for (const [k, v] of Object.entries(old)) if (!(k in parameters)) parameters[k] = v;
  }
  if (Object.keys(parameters).length > 0) {
    without(MediaType.params);
    await add(MediaType.params, goJson(sortedKeys(parameters)));
  }
  if (spec.messages !== undefined && spec.messages.length > 0) {
    without(MediaType.messages);
    await add(MediaType.messages, goJson(spec.messages.map(goMessage)));
  }

  const configBlob = await addBlobBytes(root, goJson(config));
  for (const l of layers) report({ status: statuses.get(l)! });
  report({ status: "writing manifest" });
  const manifest = { schemaVersion: 2, mediaType: MediaType.manifest, config: { mediaType: MediaType.config, digest: configBlob.digest, size: configBlob.size }, layers };
  const manifestPath = await writeModelManifest(root, spec.name, Buffer.from(goJson(manifest)));

  // the replaced version's layers that nothing names now (Ollama's oldManifest.RemoveLayers)
  const removed = before.length > 0 && !opts.env?.OLLAMA_NOPRUNE ? await removeUnreferenced(root, before, opts.keep) : [];
  return { manifestPath, removed };
}

/** The renderer and parser create.go sets by a model layer's architecture. */
const ARCH_RENDERERS: Readonly<Record<string, readonly [renderer: string, parser: string]>> = {
  gemma4: ["gemma4", "gemma4"],
  laguna: ["laguna", "laguna"],
  nemotron_h: ["nemotron-3-nano", "nemotron-3-nano"],
  nemotron_h_moe: ["nemotron-3-nano", "nemotron-3-nano"],
  nemotron_h_omni: ["nemotron-3-nano", "nemotron-3-nano"],
};

interface SourceManifest {
  config?: { digest: string };
  layers: Array<{ mediaType: string; digest: string; name?: string }>;
}

async function readManifest(root: string, name: ModelName): Promise<SourceManifest> {
  const { path, text } = await readInstalledManifest(root, name);
  let m: { config?: { digest?: unknown }; layers?: unknown };
  try {
    m = JSON.parse(text) as typeof m;
  } catch (e) {
    throw new StoreError("CORRUPT_MANIFEST", `${path}: not JSON: ${(e as Error).message}`, { manifestPath: path });
  }
  const layers = Array.isArray(m.layers) ? (m.layers as Array<Record<string, unknown>>) : [];
  const out: SourceManifest = { layers: [] };
  for (const l of layers) {
    const digest = typeof l?.digest === "string" ? canonicalDigest(l.digest) : undefined;
    if (!digest || typeof l.mediaType !== "string") throw new StoreError("CORRUPT_MANIFEST", `${path}: a layer without a media type or sha256 digest`, { manifestPath: path });
    out.layers.push({ mediaType: l.mediaType, digest, ...(typeof l.name === "string" && l.name ? { name: l.name } : {}) });
  }
  const cfg = typeof m.config?.digest === "string" ? canonicalDigest(m.config.digest) : undefined;
  if (cfg) out.config = { digest: cfg };
  return out;
}

async function blobSize(root: string, digest: string, what: string): Promise<number> {
  const path = blobPathIn(root, digest);
  const st = await stat(path).catch(() => undefined);
  if (!st) throw new StoreError("MISSING_BLOB", `${what} is missing: ${path}`, { digest, path });
  // the store is untrusted: a FIFO or a device named like a blob is never opened
  if (!st.isFile()) throw new StoreError("UNSAFE_BLOB", `${what} at ${path} is not a regular file`, { digest, path });
  return st.size;
}

/** The source's config blob, or nothing when it has none (or it is not JSON: Ollama ignores it then). */
async function readConfig(root: string, digest: string | undefined): Promise<Record<string, unknown>> {
  if (!digest) return {};
  return readJsonBlob(root, digest, "config").catch(() => ({}));
}

async function readJsonBlob(root: string, digest: string, what: string): Promise<Record<string, unknown>> {
  const path = blobPathIn(root, digest);
  const st = await stat(path);
  // the store is untrusted: a FIFO or a device named like a blob is never opened
  if (!st.isFile()) throw new StoreError("UNSAFE_BLOB", `${what} ${path} is not a regular file`, { digest, path });
  if (st.size > 1 << 20) throw new StoreError("UNSAFE_BLOB", `${what} ${path} is ${st.size} bytes, too large for a JSON layer`, { digest, path });
  const v = JSON.parse(await readFile(path, "utf8")) as unknown;
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new StoreError("CORRUPT_MANIFEST", `${what} ${path} is not a JSON object`, { digest, path });
  return v as Record<string, unknown>;
}

/**
 * The adapter layer of `adapters` (file name → digest), as convertModelFromFiles reads them: one
 * GGUF blob of the store whose general.type is `adapter`; safetensors adapters need Ollama's converter.
 */
async function adapterLayers(root: string, adapters: Record<string, string>, report: (p: { status: string }) => void): Promise<Layer[]> {
  const entries = Object.entries(adapters);
  if (entries.length > 1) throw new StoreError("INVALID_CREATE", "only one adapter is currently supported", { adapters });
  const [file, given] = entries[0]!;
  const digest = canonicalDigest(given);
  if (!digest) throw new StoreError("INVALID_CREATE", `adapter ${JSON.stringify(file)}: ${JSON.stringify(given)} is not a sha256 digest (sha256:<64 hex digits>)`, { file, digest: given });
  if (file.endsWith(".safetensors")) throw new StoreError("INVALID_CREATE", `adapter ${JSON.stringify(file)}: safetensors adapters need Ollama's converter; give a GGUF LoRA adapter (llama.cpp's convert_lora_to_gguf.py writes one)`, { file });
  report({ status: "parsing GGUF" });
  const path = blobPathIn(root, digest);
  const size = await blobSize(root, digest, `adapter ${JSON.stringify(file)} (${digest})`).catch((e: StoreError) => {
    throw new StoreError("INVALID_CREATE", e.code === "MISSING_BLOB" ? `adapter ${JSON.stringify(file)}: blob ${digest} is not in the store; upload it first (POST /api/blobs/${digest})` : e.message, e.details);
  });
  let type: string | undefined;
  try {
    const gguf = await readGguf(path);
    type = gguf.tryGetString(GgufKeys.TYPE);
    await gguf.close();
  } catch (e) {
    throw new StoreError("INVALID_CREATE", `adapter ${JSON.stringify(file)} (${path}): supplied file was not in GGUF format: ${(e as Error).message}`, { file, path });
  }
  if (type !== "adapter") throw new StoreError("INVALID_CREATE", `adapter ${JSON.stringify(file)} (${path}): general.type is ${JSON.stringify(type ?? "")}, expected "adapter" (a GGUF LoRA adapter)`, { file, path, type });
  return [{ mediaType: MediaType.adapter, digest, size, from: file }];
}

async function ggufFacts(path: string, what: string): Promise<{ arch: string; parameterCount: number; fileType: string }> {
  let gguf;
  try {
    gguf = await readGguf(path);
  } catch (e) {
    throw new StoreError("CORRUPT_MANIFEST", `${what} at ${path} is not a GGUF Ollama can read: ${(e as Error).message}`, { path });
  }
  const s = summarize(gguf);
  const arch = gguf.tryGetString(GgufKeys.ARCHITECTURE) ?? "";
  await gguf.close();
  return { arch, parameterCount: s.parameterCount, fileType: s.fileTypeId !== undefined ? (fileTypeName(s.fileTypeId) ?? "unknown") : "unknown" };
}

/** Ollama's format.HumanNumber: 1000000000 → "1B", 1230000000 → "1.2B", 268100000 → "268.10M". */
export function humanNumber(n: number): string {
  if (n >= 1e9) return n % 1e9 === 0 ? `${n / 1e9}B` : `${(n / 1e9).toFixed(1)}B`;
  if (n >= 1e6) return n % 1e6 === 0 ? `${n / 1e6}M` : `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e3) return `${Math.round(n / 1e3)}K`;
  return String(n);
}

/** An api.Message as Go marshals it: role (lower case), content, then the fields it has. */
function goMessage(m: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { role: typeof m.role === "string" ? m.role.toLowerCase() : "", content: typeof m.content === "string" ? m.content : "" };
  for (const k of ["thinking", "images", "tool_calls", "tool_name", "tool_call_id"]) {
    const v = m[k];
    if (v !== undefined && v !== null && v !== "" && !(Array.isArray(v) && v.length === 0)) out[k] = v;
  }
  return out;
}

/** A Go map's JSON: keys in sorted order, at every depth. */
function sortedKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortedKeys);
  if (typeof v !== "object" || v === null) return v;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v).sort()) out[k] = sortedKeys((v as Record<string, unknown>)[k]);
  return out;
}

/**
 * JSON as Go's json.Encoder writes it (what Ollama's blobs and manifests hold): `<`, `>`, `&`,
 * U+2028 and U+2029 escaped, and a newline at the end. Objects keep the order they are built in.
 */
export function goJson(v: unknown): string {
  return JSON.stringify(v).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`) + "\n";
}
