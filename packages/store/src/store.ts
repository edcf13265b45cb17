import { createReadStream, existsSync, lstatSync, realpathSync, statSync, type Stats } from "node:fs";
import { readdir } from "node:fs/promises";
import { createHash } from "node:crypto";
import { homedir } from "node:os";
import { isAbsolute, join, resolve as resolvePath, sep } from "node:path";
import { fileKind, readSmallFile } from "@compat/files";
import { blobFileName, canonicalDigest } from "./digest";
import { StoreError } from "./errors";
import { MediaType } from "./media-types";
import { byName, displayName, fullName, isRollbackName, isValidName, manifestSegments, parseModelName, type ModelName } from "./name";

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
  /** The messages layer: turns put before every chat's own (`ollama create` with messages). */
  messages?: Array<{ role: string; content: string }>;
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

/** A manifest, a config or params blob is a few hundred bytes; anything this large is not one (and is not read into memory). */
const MAX_JSON_BYTES = 1 << 20;
/** Templates and system prompts run to kilobytes; a text layer is read into memory up to this. */
const MAX_TEXT_LAYER_BYTES = 4 << 20;

/**
 * How a FILE-or-MODEL argument is read, one rule for every command and entry point: a word
 * with no path separator and no `.gguf` ending is a model name, always (a file or folder of
 * that name in the working directory does not hijack it); anything else is a file if
 * something exists at that path (and must then be a regular file); otherwise a model name
 * (`namespace/model:tag`) if it parses as one.
 */
export function isPathLike(ref: string): boolean {
  return /[\\/]/.test(ref) || /\.gguf$/i.test(ref);
}

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
    return join(this.root, "blobs", blobFileName(digest));
  }

  /**
   * A model reference (`gemma3`, `gemma3:4b`, `namespace/model:tag`, `host/namespace/model:tag`)
   * or a path to a GGUF file, told apart by isPathLike's rule.
   */
  async resolve(ref: string): Promise<ResolvedModel> {
    const file = asFile(ref);
    if (file) return file;
    const n = parseModelName(ref);
    if (!n) {
      const looksLikePath = isPathLike(ref) || ref.startsWith(".") || isAbsolute(ref);
      throw new StoreError(
        "INVALID_REFERENCE",
        looksLikePath ? `${JSON.stringify(ref)}: no such file` : `${JSON.stringify(ref)} is neither a file nor an Ollama model name ([host/][namespace/]model[:tag])`,
        { ref },
      );
    }
    try {
      return await this.resolveName(n, ref);
    } catch (e) {
      // a bare word is a name even when a file of that name is here: say how to mean the file
      if (e instanceof StoreError && e.code === "UNKNOWN_MODEL" && !isPathLike(ref) && existsSync(ref)) {
        throw new StoreError("UNKNOWN_MODEL", `${e.message}; to read the file ${JSON.stringify(ref)} in this folder, write ./${ref}`, e.details);
      }
      throw e;
    }
  }

  /**
   * `blobs`: what an earlier resolve of the same listing learnt about the blobs (list() passes
   * one for all its manifests: a blob many manifests share is looked at once).
   */
  async resolveName(n: ModelName, ref = displayName(n), blobs: BlobLookups = new BlobLookups()): Promise<ResolvedModel> {
    const manifestPath = this.manifestPath(n);
    let text: string;
    try {
      text = await readSmallFile(manifestPath, MAX_JSON_BYTES, (why) => new StoreError("CORRUPT_MANIFEST", `${manifestPath} ${why}, not a manifest`, { ref, manifestPath }));
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT" || code === "ENOTDIR") {
        throw new StoreError("UNKNOWN_MODEL", `model ${JSON.stringify(ref)} is not installed (no manifest at ${manifestPath})`, { ref, manifestPath });
      }
      if (e instanceof StoreError) throw e;
      throw new StoreError("CORRUPT_MANIFEST", `${manifestPath}: cannot read it: ${(e as Error).message}`, { ref, manifestPath });
    }
    const manifest = parseManifest(text, manifestPath);
    return this.fromManifest(manifest, n, ref, manifestPath, blobs);
  }

  private async fromManifest(manifest: Manifest, n: ModelName, ref: string, manifestPath: string, blobs: BlobLookups): Promise<ResolvedModel> {
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
      const cfg = await this.readLayer(manifest.config, manifestPath, MAX_JSON_BYTES, blobs);
      out.config = parseJsonLayer(cfg, manifest.config, manifestPath);
    }
    for (const layer of manifest.layers) {
      const path = await this.checkBlob(layer, manifestPath, blobs);
      switch (layer.mediaType) {
        case MediaType.model:
          out.modelPath = path; // the last one wins, as in Ollama
          out.modelDigest = canonicalDigest(layer.digest)!;
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
          out.template = await this.readLayer(layer, manifestPath, MAX_TEXT_LAYER_BYTES, blobs);
          break;
        case MediaType.system:
          out.system = await this.readLayer(layer, manifestPath, MAX_TEXT_LAYER_BYTES, blobs);
          break;
        case MediaType.params:
          out.params = parseJsonLayer(await this.readLayer(layer, manifestPath, MAX_JSON_BYTES, blobs), layer, manifestPath);
          break;
        case MediaType.messages:
          out.messages = parseMessagesLayer(await this.readLayer(layer, manifestPath, MAX_TEXT_LAYER_BYTES, blobs), layer, manifestPath);
          break;
      }
    }
    if (!out.modelPath) {
      throw new StoreError("NO_MODEL_LAYER", `model "${ref}" has no GGUF model layer (${manifestPath}); llama.cpp cannot serve it`, { ref, manifestPath });
    }
    return out;
  }

  private async checkBlob(layer: ManifestLayer, manifestPath: string, blobs: BlobLookups): Promise<string> {
    const path = this.blobPath(layer.digest);
    const looked = await blobs.once(blobs.stats, path, () => this.lookAtBlob(path));
    if ("outside" in looked) {
      throw new StoreError("UNSAFE_BLOB", `blob ${path} (${layer.mediaType}) named by ${manifestPath} is a symlink out of the store, to ${looked.outside}`, {
        digest: layer.digest,
        path,
        manifestPath,
      });
    }
    if ("missing" in looked) {
      throw new StoreError("MISSING_BLOB", `blob ${layer.digest} (${layer.mediaType}) named by ${manifestPath} is missing: ${path}`, {
        digest: layer.digest,
        path,
        manifestPath,
      });
    }
    const st = looked.st;
    // a FIFO or device would hang whoever opens it (llama-server too): refused before anyone does
    if (!st.isFile()) {
      throw new StoreError("UNSAFE_BLOB", `blob ${path} (${layer.mediaType}) named by ${manifestPath} is ${fileKind(st)}, not a regular file`, {
        digest: layer.digest,
        path,
        manifestPath,
      });
    }
    const size = st.size;
    if (size !== layer.size) {
      throw new StoreError("MISSING_BLOB", `blob ${path} has ${size} bytes, the manifest says ${layer.size} (incomplete download?)`, {
        digest: layer.digest,
        path,
        manifestPath,
      });
    }
    if (this.options.verifyDigest && layer.mediaType === MediaType.model) await verifyBlobDigest(path, layer.digest, manifestPath);
    return path;
  }

  /**
   * What a blob path is: a file's stat, a symlink out of the store (its target), or nothing
   * there. Metadata only, looked at synchronously (microseconds each, where a trip through
   * libuv's threads costs a listing of the store more).
   */
  private async lookAtBlob(path: string): Promise<{ st: Stats } | { outside: string } | { missing: true }> {
    try {
      // a blob that is a symlink must still point into the store: a manifest must not make us read any file
      if (lstatSync(path).isSymbolicLink()) {
        const [target, root] = [realpathSync(path), realpathSync(this.root)];
        if (target !== root && !target.startsWith(root + sep)) return { outside: target };
      }
      return { st: statSync(path) };
    } catch {
      return { missing: true };
    }
  }

  /** A layer read into memory: a regular file of at most `max` bytes, whatever its size on disk claims. */
  private async readLayer(layer: ManifestLayer, manifestPath: string, max: number, blobs: BlobLookups): Promise<string> {
    const path = await this.checkBlob(layer, manifestPath, blobs);
    try {
      return await blobs.once(blobs.texts, `${max}:${path}`, async () => readSmallFile(path, max, (why) => new Refusal(why)));
    } catch (e) {
      if (e instanceof Refusal) throw new StoreError("UNSAFE_BLOB", `${layer.mediaType} blob ${path} named by ${manifestPath} ${e.message}`, { digest: layer.digest, path, manifestPath });
      throw new StoreError("MISSING_BLOB", `blob ${path} (${layer.mediaType}) named by ${manifestPath} cannot be read: ${(e as Error).message}`, { digest: layer.digest, path, manifestPath });
    }
  }

  /** Every installed model (sorted by name); manifests that do not resolve are listed with their error, one each. */
  async list(): Promise<Array<{ name: string; model?: ResolvedModel; error?: StoreError }>> {
    return (await this.resolveAll(await this.names())).sort(byName);
  }

  /**
   * Resolves manifests as list() does (in the order given), each that fails as its error. A few at a time: each is a
   * dozen small reads and stats, and one after another a store of thousands of models took
   * seconds of waiting on the file system; the blobs they share are looked at once.
   */
  async resolveAll(names: readonly ModelName[], signal?: AbortSignal): Promise<Array<{ name: string; model?: ResolvedModel; error?: StoreError }>> {
    const blobs = new BlobLookups();
    const out: Array<{ name: string; model?: ResolvedModel; error?: StoreError }> = new Array(names.length);
    await inParallel(names, RESOLVE_AT_ONCE, async (n, i) => {
      signal?.throwIfAborted();
      try {
        out[i] = { name: displayName(n), model: await this.resolveName(n, undefined, blobs) };
      } catch (e) {
        const error = e instanceof StoreError ? e : new StoreError("CORRUPT_MANIFEST", `${this.manifestPath(n)}: ${(e as Error).message}`, { manifestPath: this.manifestPath(n) });
        out[i] = { name: displayName(n), error };
      }
    });
    return out;
  }

  /** Names of every model, in no particular order: each manifest file (manifests/host/namespace/model/tag) but migrate's rollback records. */
  async names(): Promise<ModelName[]> {
    return (await this.scan()).names;
  }

  /** Names of every manifest file, migrate's rollback records (name.ts rollbackName) included. */
  async manifestNames(): Promise<ModelName[]> {
    return (await this.scan(true)).names;
  }

  /**
   * The models' names (with `rollbacks`, migrate's rollback records too), and the folders of
   * manifests/ (itself included) that hold them: what a watcher of the store watches.
   */
  async scan(rollbacks = false): Promise<{ names: ModelName[]; folders: string[] }> {
    const out: ModelName[] = [];
    const folders: string[] = [];
    // one level at a time, its folders read a few at once (a store of thousands of models has as many folders)
    let level: string[][] = [[]];
    for (let depth = 0; depth <= 3; depth++) {
      const next: string[][] = [];
      await inParallel(level, RESOLVE_AT_ONCE, async (parts) => {
        let entries;
        const folder = join(this.root, "manifests", ...parts);
        try {
          entries = await readdir(folder, { withFileTypes: true });
        } catch {
          return;
        }
        folders.push(folder);
        for (const e of entries) {
          if (depth < 3 && e.isDirectory()) next.push([...parts, e.name]);
          // anything at the tag level but a folder is a manifest to judge: a FIFO or a link is listed, and refused when read
          else if (depth === 3 && !e.isDirectory()) {
            const [host, namespace, model] = parts as [string, string, string];
            const n = { host, namespace, model, tag: e.name };
            if (isValidName(n) && (rollbacks || !isRollbackName(n))) out.push(n);
          }
        }
      });
      level = next;
    }
    return { names: out, folders };
  }
}

/** Runs `job` on every item, at most `width` at a time. */
async function inParallel<T>(items: readonly T[], width: number, job: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      await job(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
}

/** How many manifests resolveAll reads at once (libuv's file-system threads keep a few busy). */
const RESOLVE_AT_ONCE = 16;

/**
 * What the resolves of one listing learnt about blobs: each blob's stat and each small layer's
 * text, looked up once however many manifests name them (a store's models share templates,
 * licenses and params, and tags share their whole model).
 */
export class BlobLookups {
  readonly stats = new Map<string, Promise<{ st: Stats } | { outside: string } | { missing: true }>>();
  readonly texts = new Map<string, Promise<string>>();

  once<T>(memo: Map<string, Promise<T>>, key: string, look: () => Promise<T>): Promise<T> {
    let p = memo.get(key);
    if (p === undefined) memo.set(key, (p = look()));
    return p;
  }
}

/**
 * A manifest's text, read as the store reads it: a regular file of at most 1 MiB, opened without
 * blocking, so a FIFO or a device where a manifest should be is CORRUPT_MANIFEST, never a hang.
 */
export async function readManifestText(path: string): Promise<string> {
  return readSmallFile(path, MAX_JSON_BYTES, (why) => new StoreError("CORRUPT_MANIFEST", `${path} ${why}, not a manifest`, { manifestPath: path }));
}

/** A small file refused for what it is (readSmallFile's reason), for the caller to word. */
class Refusal extends Error {}

/** A path-like reference to something on disk (isPathLike's rule): a regular file, or INVALID_REFERENCE saying what it is. */
function asFile(ref: string): ResolvedModel | undefined {
  if (!isPathLike(ref)) return undefined;
  let st: Stats;
  try {
    st = statSync(ref);
  } catch {
    return undefined;
  }
  if (!st.isFile()) throw new StoreError("INVALID_REFERENCE", `${JSON.stringify(ref)} is ${fileKind(st)}, not a GGUF file`, { ref });
  const path = resolvePath(ref);
  return { ref, name: path.split(/[\\/]/).pop()!, kind: "file", modelPath: path, projectors: [], adapters: [], params: {}, size: st.size };
}


/** Parses and checks a manifest: an object whose layers each have a media type, a sha256 digest and a size. */
export function parseManifest(text: string, path: string): Manifest {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    // V8's message quotes the bytes, which may be anything (escapes, another file's content)
    throw new StoreError("CORRUPT_MANIFEST", `${path}: not JSON (${text.length} characters; expected a docker v2 manifest)`, { manifestPath: path });
  }
  const bad = (why: string) => new StoreError("CORRUPT_MANIFEST", `${path}: ${why}`, { manifestPath: path });
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw bad("expected a JSON object");
  const m = raw as Record<string, unknown>;
  if (!Array.isArray(m.layers)) throw bad(`expected "layers" to be an array`);
  const layer = (x: unknown, where: string): ManifestLayer => {
    if (typeof x !== "object" || x === null) throw bad(`${where}: expected an object`);
    const l = x as Record<string, unknown>;
    if (typeof l.mediaType !== "string") throw bad(`${where}: expected a string "mediaType"`);
    if (typeof l.digest !== "string" || canonicalDigest(l.digest) === undefined) throw bad(`${where}: expected "digest" to be sha256:<64 hex digits>`);
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
  throw new StoreError("CORRUPT_MANIFEST", `${layer.mediaType} blob ${layer.digest} of ${manifestPath} is not a JSON object`, { manifestPath });
}

/** A messages layer: a JSON array of api.Message; the role and text of each (what Ollama's chat puts first). */
function parseMessagesLayer(text: string, layer: ManifestLayer, manifestPath: string): Array<{ role: string; content: string }> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    // reported below
  }
  if (!Array.isArray(v)) throw new StoreError("CORRUPT_MANIFEST", `${layer.mediaType} blob ${layer.digest} of ${manifestPath} is not a JSON array of messages`, { manifestPath });
  return v.map((m: { role?: unknown; content?: unknown }) => ({ role: typeof m?.role === "string" ? m.role : "user", content: typeof m?.content === "string" ? m.content : "" }));
}

/** Streams the blob through sha256 and compares it with the digest in its name. */
async function verifyBlobDigest(path: string, digest: string, manifestPath: string): Promise<void> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  const actual = `sha256:${hash.digest("hex")}`;
  if (actual !== canonicalDigest(digest)!) {
    throw new StoreError("DIGEST_MISMATCH", `blob ${path} hashes to ${actual}, not the ${canonicalDigest(digest)!} its name and ${manifestPath} say`, {
      digest,
      path,
      manifestPath,
    });
  }
}

/** "a FIFO", "a directory", …: what a path is when it is not the regular file expected. */
