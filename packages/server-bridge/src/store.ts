import { existsSync, statSync } from "node:fs";
import { createReadStream } from "node:fs";
import { lstat, readdir, readFile, realpath, stat } from "node:fs/promises";
import { createHash } from "node:crypto";
import { homedir } from "node:os";
import { isAbsolute, join, resolve as resolvePath, sep } from "node:path";
import { BridgeError } from "./errors";
import { MediaType } from "./media-types";
import { displayName, fullName, isValidName, manifestSegments, parseModelName, type ModelName } from "./name";

/** One layer as the manifest lists it. */
export interface ManifestLayer {
  mediaType: string;
  digest: string;
  size: number;
  from?: string;
  name?: string;
}

export interface Manifest {
  schemaVersion?: number;
  mediaType?: string;
  config?: ManifestLayer;
  layers: ManifestLayer[];
}

/** A model ready to serve: every file it needs, by role. */
export interface ResolvedModel {
  /** What the caller asked for. */
  ref: string;
  /** The name to serve it under: `gemma3:4b` for store models, the file name for plain files. */
  name: string;
  kind: "store" | "file";
  /** The GGUF with the weights (a blob, or the plain file). */
  modelPath: string;
  /** `sha256:<hex>` of the model blob; for plain files, undefined (the cache digests them). */
  modelDigest?: string;
  projectors: string[];
  adapters: string[];
  draft?: string;
  /** Ollama's Go template (not Jinja); llama.cpp uses the GGUF's own template unless it has none. */
  template?: string;
  system?: string;
  /** The params layer: Ollama options (num_ctx, stop, temperature, …). */
  params: Record<string, unknown>;
  /** The config blob (model_format, model_family, file_type, renderer, …). */
  config?: Record<string, unknown>;
  manifestPath?: string;
  fullName?: string;
  /** Bytes of all layers (store) or of the file. */
  size: number;
}

/** `$OLLAMA_MODELS`, else `~/.ollama/models` (Ollama's envconfig.Models). */
export function defaultModelsDir(env: Record<string, string | undefined> = process.env): string {
  return env.OLLAMA_MODELS || join(homedir(), ".ollama", "models");
}

const DIGEST = /^sha256[:-]([0-9a-fA-F]{64})$/;
/** A manifest is a few hundred bytes; anything this large is not one (and is not read into memory). */
const MAX_MANIFEST_BYTES = 1 << 20;

export interface StoreOptions {
  /** Hash the model blob and compare it with the sha256 in its name before use (slow on big blobs). */
  verifyDigest?: boolean;
}

/** Ollama's model store on disk: manifests/<host>/<namespace>/<model>/<tag> and blobs/sha256-<hex>. */
export class ModelStore {
  readonly root: string;

  constructor(
    root?: string,
    env: Record<string, string | undefined> = process.env,
    readonly options: StoreOptions = {},
  ) {
    this.root = resolvePath(root ?? defaultModelsDir(env));
  }

  manifestPath(n: ModelName): string {
    return join(this.root, "manifests", ...manifestSegments(n));
  }

  blobPath(digest: string): string {
    const m = DIGEST.exec(digest);
    if (!m) throw new BridgeError("CORRUPT_MANIFEST", `"${digest}" is not a sha256 digest`);
    return join(this.root, "blobs", `sha256-${m[1]!.toLowerCase()}`);
  }

  /**
   * A model reference (`gemma3`, `gemma3:4b`, `namespace/model:tag`, `host/namespace/model:tag`)
   * or a path to a GGUF file. Files win when both readings exist.
   */
  async resolve(ref: string): Promise<ResolvedModel> {
    const file = asFile(ref);
    if (file) return file;
    const n = parseModelName(ref);
    if (!n) {
      const looksLikePath = ref.endsWith(".gguf") || ref.startsWith(".") || isAbsolute(ref);
      throw new BridgeError(
        "INVALID_REFERENCE",
        looksLikePath ? `${ref}: no such file` : `"${ref}" is neither a file nor an Ollama model name ([host/][namespace/]model[:tag])`,
        { ref },
      );
    }
    return this.resolveName(n, ref);
  }

  async resolveName(n: ModelName, ref = displayName(n)): Promise<ResolvedModel> {
    const manifestPath = this.manifestPath(n);
    let text: string;
    try {
      const size = (await stat(manifestPath)).size;
      if (size > MAX_MANIFEST_BYTES) {
        throw new BridgeError("CORRUPT_MANIFEST", `${manifestPath} is ${size} bytes, not a manifest (expected at most ${MAX_MANIFEST_BYTES})`, { ref, manifestPath });
      }
      text = await readFile(manifestPath, "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT" || (e as NodeJS.ErrnoException).code === "ENOTDIR") {
        throw new BridgeError("UNKNOWN_MODEL", `model "${ref}" is not installed (no manifest at ${manifestPath})`, { ref, manifestPath });
      }
      throw e;
    }
    const manifest = parseManifest(text, manifestPath);
    return this.fromManifest(manifest, n, ref, manifestPath);
  }

  private async fromManifest(manifest: Manifest, n: ModelName, ref: string, manifestPath: string): Promise<ResolvedModel> {
    const out: ResolvedModel = {
      ref,
      name: displayName(n),
      fullName: fullName(n),
      kind: "store",
      modelPath: "",
      projectors: [],
      adapters: [],
      params: {},
      manifestPath,
      size: manifest.layers.reduce((s, l) => s + l.size, manifest.config?.size ?? 0),
    };
    if (manifest.config?.digest) {
      const cfg = await this.readLayer(manifest.config, manifestPath);
      out.config = parseJsonLayer(cfg, manifest.config, manifestPath);
    }
    for (const layer of manifest.layers) {
      const path = await this.checkBlob(layer, manifestPath);
      switch (layer.mediaType) {
        case MediaType.model:
          out.modelPath = path; // the last one wins, as in Ollama
          out.modelDigest = normalizeDigest(layer.digest);
          break;
        case MediaType.projector:
          out.projectors.push(path);
          break;
        case MediaType.adapter:
          out.adapters.push(path);
          break;
        case MediaType.draft:
          out.draft = path;
          break;
        case MediaType.template:
        case MediaType.prompt:
          out.template = await readFile(path, "utf8");
          break;
        case MediaType.system:
          out.system = await readFile(path, "utf8");
          break;
        case MediaType.params:
          out.params = parseJsonLayer(await readFile(path, "utf8"), layer, manifestPath);
          break;
      }
    }
    if (!out.modelPath) {
      throw new BridgeError("NO_MODEL_LAYER", `model "${ref}" has no GGUF model layer (${manifestPath}); llama.cpp cannot serve it`, { ref, manifestPath });
    }
    return out;
  }

  private async checkBlob(layer: ManifestLayer, manifestPath: string): Promise<string> {
    const path = this.blobPath(layer.digest);
    let size: number;
    try {
      await this.checkInsideStore(path, layer, manifestPath);
      size = (await stat(path)).size;
    } catch (e) {
      if (e instanceof BridgeError) throw e;
      throw new BridgeError("MISSING_BLOB", `blob ${layer.digest} (${layer.mediaType}) named by ${manifestPath} is missing: ${path}`, {
        digest: layer.digest,
        path,
        manifestPath,
      });
    }
    if (size !== layer.size) {
      throw new BridgeError("MISSING_BLOB", `blob ${path} has ${size} bytes, the manifest says ${layer.size} (incomplete download?)`, {
        digest: layer.digest,
        path,
        manifestPath,
      });
    }
    if (this.options.verifyDigest && layer.mediaType === MediaType.model) await verifyBlobDigest(path, layer.digest, manifestPath);
    return path;
  }

  /** A blob that is a symlink must still point into the store: a manifest must not make us read any file. */
  private async checkInsideStore(path: string, layer: ManifestLayer, manifestPath: string): Promise<void> {
    if (!(await lstat(path)).isSymbolicLink()) return;
    const [target, root] = await Promise.all([realpath(path), realpath(this.root)]);
    if (target === root || target.startsWith(root + sep)) return;
    throw new BridgeError("UNSAFE_BLOB", `blob ${path} (${layer.mediaType}) named by ${manifestPath} is a symlink out of the store, to ${target}`, {
      digest: layer.digest,
      path,
      manifestPath,
    });
  }

  private async readLayer(layer: ManifestLayer, manifestPath: string): Promise<string> {
    return readFile(await this.checkBlob(layer, manifestPath), "utf8");
  }

  /** Every installed model (sorted by name); manifests that do not resolve are listed with their error. */
  async list(): Promise<Array<{ name: string; model?: ResolvedModel; error?: BridgeError }>> {
    const names = await this.names();
    const out: Array<{ name: string; model?: ResolvedModel; error?: BridgeError }> = [];
    for (const n of names) {
      try {
        out.push({ name: displayName(n), model: await this.resolveName(n) });
      } catch (e) {
        if (!(e instanceof BridgeError)) throw e;
        out.push({ name: displayName(n), error: e });
      }
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Names of every manifest file (manifests/host/namespace/model/tag). */
  async names(): Promise<ModelName[]> {
    const base = join(this.root, "manifests");
    const out: ModelName[] = [];
    const walk = async (dir: string, parts: string[]): Promise<void> => {
      let entries;
      try {
        entries = await readdir(dir, { withFileTypes: true });
      } catch {
        return;
      }
      for (const e of entries) {
        if (parts.length < 3 && e.isDirectory()) await walk(join(dir, e.name), [...parts, e.name]);
        else if (parts.length === 3 && e.isFile()) {
          const [host, namespace, model] = parts as [string, string, string];
          const n = { host, namespace, model, tag: e.name };
          if (isValidName(n)) out.push(n);
        }
      }
    };
    await walk(base, []);
    return out;
  }
}

function asFile(ref: string): ResolvedModel | undefined {
  // Bare words (`gemma3`) are always names, even if a file of that name sits in the working directory.
  if (!/[\\/]/.test(ref) && !ref.endsWith(".gguf")) return undefined;
  if (!existsSync(ref)) return undefined;
  const st = statSync(ref);
  if (!st.isFile()) return undefined;
  const path = resolvePath(ref);
  return { ref, name: path.split(/[\\/]/).pop()!, kind: "file", modelPath: path, projectors: [], adapters: [], params: {}, size: st.size };
}

function normalizeDigest(d: string): string {
  return `sha256:${DIGEST.exec(d)![1]!.toLowerCase()}`;
}

/** Parses and checks a manifest: an object whose layers each have a media type, a sha256 digest and a size. */
export function parseManifest(text: string, path: string): Manifest {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new BridgeError("CORRUPT_MANIFEST", `${path}: not JSON (${(e as Error).message})`, { manifestPath: path });
  }
  const bad = (why: string) => new BridgeError("CORRUPT_MANIFEST", `${path}: ${why}`, { manifestPath: path });
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw bad("expected a JSON object");
  const m = raw as Record<string, unknown>;
  if (!Array.isArray(m.layers)) throw bad(`expected "layers" to be an array`);
  const layer = (x: unknown, where: string): ManifestLayer => {
    if (typeof x !== "object" || x === null) throw bad(`${where}: expected an object`);
    const l = x as Record<string, unknown>;
    if (typeof l.mediaType !== "string") throw bad(`${where}: expected a string "mediaType"`);
    if (typeof l.digest !== "string" || !DIGEST.test(l.digest)) throw bad(`${where}: expected "digest" to be sha256:<64 hex digits>`);
    if (typeof l.size !== "number" || !Number.isSafeInteger(l.size) || l.size < 0) throw bad(`${where}: expected a non-negative integer "size"`);
    return l as unknown as ManifestLayer;
  };
  const layers = m.layers.map((x, i) => layer(x, `layers[${i}]`));
  const config = m.config === undefined || (m.config as { digest?: unknown } | null)?.digest === "" ? undefined : layer(m.config, "config");
  return { schemaVersion: m.schemaVersion as number | undefined, mediaType: m.mediaType as string | undefined, config, layers };
}

function parseJsonLayer(text: string, layer: ManifestLayer, manifestPath: string): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v === "object" && v !== null && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw new BridgeError("CORRUPT_MANIFEST", `${layer.mediaType} blob ${layer.digest} of ${manifestPath} is not a JSON object`, { manifestPath });
}

/** Streams the blob through sha256 and compares it with the digest in its name. */
async function verifyBlobDigest(path: string, digest: string, manifestPath: string): Promise<void> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  const actual = `sha256:${hash.digest("hex")}`;
  if (actual !== normalizeDigest(digest)) {
    throw new BridgeError("DIGEST_MISMATCH", `blob ${path} hashes to ${actual}, not the ${normalizeDigest(digest)} its name and ${manifestPath} say`, {
      digest,
      path,
      manifestPath,
    });
  }
}
