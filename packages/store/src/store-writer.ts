/** The writing side of the store ModelStore reads: blobs and manifests as `ollama pull` lays them out. */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { copyFile, link, mkdir, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { StoreError } from "./errors";
import { MediaType } from "./media-types";
import { manifestSegments, parseModelName, type ModelName } from "./name";

export interface StoreModelSpec {
  /** `model:tag`, `namespace/model:tag` or `host/namespace/model:tag` (defaults registry.ollama.ai, library, latest). */
  name: string;
  /** The GGUF: a file to copy into blobs/ or its bytes. */
  model: string | Uint8Array;
  projector?: string | Uint8Array;
  adapters?: Array<string | Uint8Array>;
  template?: string;
  system?: string;
  params?: Record<string, unknown>;
  license?: string;
  /** Extra fields of the config blob (model_format gguf, model_family, file_type, …). */
  config?: Record<string, unknown>;
}

export interface StoreLayer {
  mediaType: string;
  digest: string;
  size: number;
}

export interface BuiltModel {
  name: string;
  manifestPath: string;
  layers: StoreLayer[];
  blob(mediaType: string): string;
}

/**
 * Writes an Ollama model store the way `ollama pull` leaves it: content-addressed blobs
 * `blobs/sha256-<hex>` and one manifest per name at
 * `manifests/<host>/<namespace>/<model>/<tag>` (a docker v2 manifest whose config and
 * layers point at the blobs by digest). What ModelStore reads; tests and demos build
 * stores with it. An invalid name throws StoreError INVALID_REFERENCE.
 */
export async function buildOllamaStore(root: string, models: readonly StoreModelSpec[]): Promise<BuiltModel[]> {
  const out: BuiltModel[] = [];
  await mkdir(join(root, "blobs"), { recursive: true });
  for (const spec of models) {
    const layers: StoreLayer[] = [];
    const add = async (mediaType: string, data: string | Uint8Array, isPath: boolean) => {
      if (isPath) layers.push(await fileBlob(root, mediaType, data as string));
      else layers.push(await writeBlob(root, mediaType, typeof data === "string" ? Buffer.from(data, "utf8") : data));
    };
    await add(MediaType.model, spec.model, typeof spec.model === "string");
    if (spec.projector !== undefined) await add(MediaType.projector, spec.projector, typeof spec.projector === "string");
    for (const a of spec.adapters ?? []) await add(MediaType.adapter, a, typeof a === "string");
    if (spec.template !== undefined) await add(MediaType.template, spec.template, false);
    if (spec.system !== undefined) await add(MediaType.system, spec.system, false);
    if (spec.params !== undefined) await add(MediaType.params, JSON.stringify(spec.params), false);
    if (spec.license !== undefined) await add(MediaType.license, spec.license, false);
    const config = await writeBlob(
      root,
      MediaType.config,
      Buffer.from(JSON.stringify({ model_format: "gguf", model_family: "", model_families: null, model_type: "", file_type: "F16", architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: layers.map((l) => l.digest) }, ...spec.config })),
    );
    const manifest = { schemaVersion: 2, mediaType: MediaType.manifest, config, layers };
    const manifestPath = join(root, "manifests", ...manifestSegments(parsedName(spec.name)));
    await mkdir(join(manifestPath, ".."), { recursive: true });
    await writeFile(manifestPath, JSON.stringify(manifest));
    out.push({
      name: spec.name,
      manifestPath,
      layers,
      blob: (mediaType) => {
        const l = layers.find((x) => x.mediaType === mediaType);
        if (!l) throw new StoreError("MISSING_BLOB", `${spec.name} has no ${mediaType} layer`, { name: spec.name, mediaType });
        return join(root, "blobs", l.digest.replace(":", "-"));
      },
    });
  }
  return out;
}

async function writeBlob(root: string, mediaType: string, bytes: Uint8Array): Promise<StoreLayer> {
  const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
  await writeFile(join(root, "blobs", digest.replace(":", "-")), bytes);
  return { mediaType, digest, size: bytes.length };
}

/** A file as a blob: hashed as a stream, then hard-linked (sparse files stay sparse), copied if it cannot be. */
async function fileBlob(root: string, mediaType: string, path: string): Promise<StoreLayer> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 22 })) hash.update(chunk as Buffer);
  const digest = `sha256:${hash.digest("hex")}`;
  const dest = join(root, "blobs", digest.replace(":", "-"));
  await rm(dest, { force: true });
  await link(path, dest).catch(() => copyFile(path, dest));
  return { mediaType, digest, size: (await stat(path)).size };
}

/** The name as ModelStore will look it up; a name it could not find is refused here. */
function parsedName(name: string): ModelName {
  const parsed = parseModelName(name);
  if (parsed === null) throw new StoreError("INVALID_REFERENCE", `not an Ollama model name: ${name}`, { reference: name });
  return parsed;
}
