/**
 * `pull NAME --to DIR --layout L`: a model from its registry straight into llama.cpp's layout,
 * as `export` lays it out (the same file names, record and models.ini / llama-swap.yaml), with
 * the translation written while the download runs. The model blob's header comes first (range
 * requests, growing until it parses); the views of that header plan the outputs; then the blob
 * streams in once, in order, each range written where the translation puts it and each op
 * computed as soon as its inputs have arrived (@compat/gguf streamWrite). The blob itself is
 * never stored: the disk written is the translated files. They are temp files until the blob's
 * digest matched, then renamed into place; an interrupted pull leaves only temp files, which
 * the next one (or an export into the folder) removes, and starts over.
 */
import { mkdir, open, rename, rm, type FileHandle } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { tempPathFor, trackTempFile, untrackTempFile } from "@compat/files";
import { ArrivingSource, GgufError, parseGguf, planStream, StreamWriter, type GgufModel, type StreamOutput, type StreamPlan } from "@compat/gguf";
import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import { modelFacts, type PreparedModel } from "@compat/prepare";
import { modelArgs, presetSection } from "@compat/server-bridge";
import { displayName, fetchLayerBytes, fullName, MediaType, openPull, streamBlob, type BlobStream, type ManifestLayer, type PullProgress, type RegistryClient, type ResolvedModel } from "@compat/store";
import { openViews } from "@compat/views";
import { CliError } from "../errors";
import type { CliIo } from "../io";
import { jsonText, terminalSafe } from "../terminal";
import { configFileOf, exportPaths, llamaServerFor, writeFolderConfig, type ExportLayout } from "./export";
import { checkReplaceable, makeFolders, readRecord, relativeTo, sweepLeftovers, writeRecord } from "./export-files";
import { humanProgress } from "./pull";

export interface PullToOptions {
  to: string;
  layout?: ExportLayout;
  insecure?: boolean;
  force?: boolean;
  json?: boolean;
  quiet?: boolean;
  profile?: TranslationProfile;
  llamaServer?: string;
}

/** First header request; it doubles until the header parses (a vocabulary of 262k tokens is a few MB). */
const FIRST_HEAD = 1 << 20;

/** One file being written: where it goes, its temp name and open handle. */
interface Target {
  final: string;
  temp: string;
  fh: FileHandle;
}

export async function pullToCommand(ref: string, opts: PullToOptions, io: CliIo): Promise<void> {
  if (opts.to.trim() === "") throw new CliError("usage", "--to: empty path; expected a folder");
  const layout = opts.layout ?? "models-dir";
  const force = opts.force === true;
  const root = resolve(opts.to);
  const report = opts.json ? (p: PullProgress) => io.out(jsonText(p) + "\n") : humanProgress(io, opts.quiet === true);
  try {
    await mkdir(root, { recursive: true });
  } catch (e) {
    throw new CliError("error", `--to ${opts.to}: cannot make the folder: ${(e as Error).message}`);
  }
  const record = await readRecord(root, force);
  const configName = configFileOf(layout);
  if (configName !== undefined) await checkReplaceable(root, join(root, configName), record, force);
  await sweepLeftovers([root, ...Object.keys(record.files).map((f) => dirname(join(root, f)))]);

  report({ status: "pulling manifest" });
  const { name, client, manifest } = await openPull(ref, { insecure: opts.insecure });
  const shownName = displayName(name);
  // the last model layer wins, as in Ollama
  const modelLayer = manifest.layers.filter((l) => l.mediaType === MediaType.model).at(-1);
  if (modelLayer === undefined) throw new CliError("error", `${fullName(name)} has no GGUF model layer; llama.cpp cannot serve it`);
  const projectorLayer = manifest.layers.find((l) => l.mediaType === MediaType.projector);

  // what the preset is made of: the small layers, as the store reads them
  const resolved: ResolvedModel = { ref, name: shownName, fullName: fullName(name), kind: "store", modelPath: "", modelDigest: modelLayer.digest, projectors: [], adapters: [], params: {}, size: 0 };
  for (const layer of [...(manifest.config ? [manifest.config] : []), ...manifest.layers]) {
    resolved.size += layer.size;
    const text = () => fetchLayerBytes(client, layer).then((b) => Buffer.from(b).toString("utf8"));
    const status = `pulling ${layer.digest.slice(7, 19)}`;
    const small = async (use: (t: string) => void) => {
      use(await text());
      report({ status, digest: layer.digest, total: layer.size, completed: layer.size });
    };
    if (layer === manifest.config) await small((t) => (resolved.config = jsonObject(t, layer)));
    else if (layer.mediaType === MediaType.template || layer.mediaType === MediaType.prompt) await small((t) => (resolved.template = t));
    else if (layer.mediaType === MediaType.system) await small((t) => (resolved.system = t));
    else if (layer.mediaType === MediaType.params) await small((t) => (resolved.params = jsonObject(t, layer)));
    else if (layer.mediaType === MediaType.adapter) throw new CliError("error", `${fullName(name)} has a LoRA adapter layer, which pull --to does not lay out yet; pull it into the store and export it instead`);
  }

  // the model blob's header, and what llama.cpp gets from it
  const model = streamBlob(client, modelLayer);
  const head = await headOf(model, modelLayer, client);
  const views = head.model === undefined ? undefined : await openViews(head.model, { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
  try {
    if (views?.status === "not-supported") {
      throw new CliError("not-supported", `${fullName(name)}: Ollama-format (${views.ollamaWriter!.join("; ")}) but neither a handler of this version nor llama.cpp knows architecture "${views.architecture}"; nothing written`);
    }
    const text = views?.text ?? null;
    // a projector layer takes the place of a tower embedded in the model, as in the store
    const tower = projectorLayer === undefined && views?.mmproj?.kind === "view" ? views.mmproj.view : null;
    const multimodal = projectorLayer !== undefined || tower !== null;
    const paths = exportPaths(root, shownName, layout, multimodal);
    const finals = multimodal ? [paths.model, paths.mmproj] : [paths.model];
    for (const f of finals) {
      await makeFolders(root, dirname(f), force);
      await checkReplaceable(root, f, record, force);
    }
    // what an earlier pull of this model killed midway left (its temp files: this pull starts over)
    await sweepLeftovers(finals.map((f) => dirname(f)));
    // recorded before anything gets its name, as export does: a pull stopped after a rename
    // leaves files known to be its own, which the next one replaces
    for (const f of finals) record.files[relativeTo(root, f)] = "copy";
    delete record.models[shownName];
    await writeRecord(root, record);

    const targets: Target[] = [];
    try {
      const modelOutputs: Array<{ view: TranslatedView | null; final: string }> = [{ view: text, final: paths.model }];
      if (tower !== null) modelOutputs.push({ view: tower, final: paths.mmproj });
      targets.push(...(await streamInto(model, modelLayer, head, modelOutputs, report)));
      if (projectorLayer !== undefined) {
        const projector = streamBlob(client, projectorLayer);
        const phead = await headOf(projector, projectorLayer, client);
        const pviews = phead.model === undefined ? undefined : await openViews(phead.model, { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
        try {
          const view = pviews?.mmproj?.kind === "view" ? pviews.mmproj.view : null;
          targets.push(...(await streamInto(projector, projectorLayer, phead, [{ view, final: paths.mmproj }], report)));
        } finally {
          await pviews?.close();
        }
      }
      report({ status: "verifying sha256 digest" });
      // every digest matched: the outputs get their names
      report({ status: "writing files" });
      for (const t of targets) {
        await t.fh.sync();
        await t.fh.close();
        await rename(t.temp, t.final);
        untrackTempFile(t.temp);
      }
      for (const dir of new Set(targets.map((t) => dirname(t.final)))) await syncDir(dir);
    } catch (e) {
      await discard(targets);
      throw e;
    }

    // the record and the configuration, as export writes them
    resolved.modelPath = paths.model;
    const served: PreparedModel = {
      resolved,
      modelPath: paths.model,
      translated: text !== null,
      cacheHit: false,
      ...(multimodal ? { mmproj: paths.mmproj } : {}),
      status: views?.status ?? "native",
      handlers: text?.report.handlers.map((h) => h.name) ?? [],
      ...(views !== undefined ? modelFacts(views.model, text) : { architecture: "", embedding: false, hasChatTemplate: true }),
    };
    const warn = (m: string) => {
      if (!opts.json) io.err(`ollama-compat: warning: ${terminalSafe(m)}\n`);
    };
    record.models[shownName] = { layout, files: finals.map((f) => relativeTo(root, f)), preset: presetSection(shownName, served, warn), args: [...modelArgs(served), "--alias", shownName] };
    const command = await writeFolderConfig(root, opts.to, layout, record, true, () => opts.llamaServer ?? llamaServerFor(io.env), (_n, m) => warn(m));
    report({ status: "success" });
    if (!opts.json) {
      for (const f of finals) io.out(`${terminalSafe(shownName)} -> ${terminalSafe(join(opts.to, relativeTo(root, f)))}\n`);
      if (command !== undefined) io.out(`serve it with: ${terminalSafe(command)}\n`);
    }
  } finally {
    await views?.close();
  }
}

interface Head {
  /** Bytes [0, n) of the blob: at least its GGUF header. */
  bytes: Uint8Array;
  /** Its parsed header, tensor data pointing at `source`; undefined when it is not a GGUF this reader takes (then written as it is). */
  model: GgufModel | undefined;
  source: ArrivingSource;
}

/** Range requests from the start of the blob, doubling until its GGUF header parses. */
async function headOf(blob: BlobStream, layer: ManifestLayer, client: RegistryClient): Promise<Head> {
  const label = `layer ${layer.digest} of ${fullName(client.name)}`;
  for (let n = FIRST_HEAD; ; n *= 2) {
    const bytes = await blob.head(n);
    const source = new ArrivingSource(label, layer.size, bytes);
    try {
      return { bytes, model: parseGguf(bytes, label, { source }), source };
    } catch (e) {
      if (e instanceof GgufError && e.code === "TRUNCATED" && bytes.length < layer.size) continue;
      // a string that is not UTF-8 is refused by our reader but may load in llama.cpp, which judges it (as the bridge does)
      if (e instanceof GgufError && e.code === "INVALID_UTF8") return { bytes, model: undefined, source };
      throw e;
    }
  }
}

/**
 * Streams the rest of one blob into its outputs: each a translated view (planned together, one
 * pass over the blob), or null for the blob as it is. Returns the temp files, not yet synced.
 */
async function streamInto(
  blob: BlobStream,
  layer: ManifestLayer,
  head: Head,
  outputs: ReadonlyArray<{ view: TranslatedView | null; final: string }>,
  report: (p: PullProgress) => void,
): Promise<Target[]> {
  const targets: Target[] = [];
  try {
    const sinks = [];
    const planned: StreamOutput[] = [];
    let plain: Target | undefined;
    for (const o of outputs) {
      const temp = tempPathFor(o.final);
      trackTempFile(temp); // removed by the binary's exit handler on SIGINT/SIGTERM
      const fh = await open(temp, "wx");
      const t = { final: o.final, temp, fh };
      targets.push(t);
      if (o.view === null) {
        plain = t;
        await fh.truncate(layer.size);
        continue;
      }
      await fh.truncate(o.view.size);
      planned.push({ model: o.view.model, layout: o.view.layout });
      sinks.push({ write: (at: number, bytes: Uint8Array) => writeAll(fh, bytes, at) });
    }
    const plan: StreamPlan = planStream(head.source, planned);
    const writer = new StreamWriter(plan, sinks, head.source);
    await writer.start();
    const status = `pulling ${layer.digest.slice(7, 19)}`;
    const feed = async (offset: number, bytes: Uint8Array) => {
      if (plain !== undefined) await writeAll(plain.fh, bytes, offset);
      if (planned.length > 0) await writer.feed(offset, bytes);
    };
    await feed(0, head.bytes);
    report({ status, digest: layer.digest, total: layer.size, completed: head.bytes.length });
    await blob.rest(feed, (completed) => report({ status, digest: layer.digest, total: layer.size, completed }));
    if (planned.length > 0 && !writer.done) throw new GgufError("DATA_LENGTH", `internal: ${layer.digest} ended with ops not run`);
    return targets;
  } catch (e) {
    await discard(targets);
    throw e;
  }
}

/** Closes and removes temp files that will not get their names. */
async function discard(targets: readonly Target[]): Promise<void> {
  for (const t of targets) {
    await t.fh.close().catch(() => undefined);
    await rm(t.temp, { force: true });
    untrackTempFile(t.temp);
  }
}

async function writeAll(fh: FileHandle, bytes: Uint8Array, at: number): Promise<void> {
  for (let off = 0; off < bytes.length; ) off += (await fh.write(bytes, off, bytes.length - off, at + off)).bytesWritten;
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

function jsonObject(text: string, layer: ManifestLayer): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    if (v !== null && typeof v === "object" && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // below
  }
  throw new CliError("error", `layer ${layer.digest} (${layer.mediaType}) is not a JSON object`);
}
