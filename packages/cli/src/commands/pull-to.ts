/**
 * `pull NAME --to DIR --layout L`: a model from its registry straight into llama.cpp's layout,
 * as `export` lays it out (the same file names, record and models.ini / llama-swap.yaml), with
 * the translation written while the download runs. The model blob's header comes first (range
 * requests, growing until it parses); the views of that header plan the outputs; then the blob
 * streams in once, in order, each range written where the translation puts it and each op
 * computed as soon as its inputs have arrived (@compat/gguf streamWrite). The blob itself is
 * never stored: the disk written is the translated files. They are partial files until every
 * blob's digest matched, then renamed into place; an interrupted pull leaves only partial files
 * and a record of the blob bytes they hold (pull-resume), and the next pull of the model into the
 * folder continues from there.
 */
import { mkdir, open, rename, rm, type FileHandle } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { acquireLock } from "@compat/files";
import { ArrivingSource, GgufError, parseGguf, planStream, StreamWriter, type GgufModel, type StreamOutput, type StreamPlan } from "@compat/gguf";
import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import { modelFacts, type PreparedModel } from "@compat/prepare";
import { modelArgs, presetSection } from "@compat/server-bridge";
import { displayName, fetchLayerBytes, fullName, MediaType, openPull, RegistryError, streamBlob, type BlobStream, type ManifestLayer, type PullProgress, type RegistryClient, type ResolvedModel } from "@compat/store";
import { openViews } from "@compat/views";
import { CliError } from "../errors";
import type { CliIo } from "../io";
import { jsonText, terminalSafe } from "../terminal";
import { configFileOf, exportPaths, llamaServerFor, writeFolderConfig, type ExportLayout } from "./export";
import { checkReplaceable, makeFolders, readRecord, relativeTo, sweepLeftovers, writeRecord } from "./export-files";
import { humanProgress } from "./pull";
import { partialPathOf, planId, readResume, replayPrefix, removeResume, resumeRecordOf, writeResume, type ResumeRecord } from "./pull-resume";

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

/**
 * First header request; it doubles until the header parses. A vocabulary of 262k tokens is a few
 * MB: one request of 8 MiB takes most headers at once (each extra one is a round trip and a parse
 * before the stream can start), and its bytes are the blob's first ones, fed like the rest.
 */
const FIRST_HEAD = 8 << 20;

/** Source bytes streamed between two resume records (each flushes the outputs first): what a crash can cost to download again, as in the store's pull. */
const CHECKPOINT = 16 << 20;

/** One file being written: where it goes, its partial name and open handle. */
interface Target {
  final: string;
  partial: string;
  fh: FileHandle;
}

/** What streamInto leaves: the outputs, whole but not yet named, and the blob's resume record. */
interface Streamed {
  targets: Target[];
  record: string;
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
    // temp files of an earlier writer killed midway (a pull's partial files stay: this one continues them)
    await sweepLeftovers(finals.map((f) => dirname(f)));
    // recorded before anything gets its name, as export does: a pull stopped after a rename
    // leaves files known to be its own, which the next one replaces
    for (const f of finals) record.files[relativeTo(root, f)] = "copy";
    delete record.models[shownName];
    await writeRecord(root, record);

    // one pull of this model into this folder at a time: they would write the same partial files
    const release = await acquireLock(`${partialPathOf(paths.model)}.lock`, { timeoutMs: 24 * 3600_000, staleMs: 60_000, what: `the pull of ${shownName} into ${opts.to}` });
    try {
      const streamed: Streamed[] = [];
      try {
        const modelOutputs: Array<{ view: TranslatedView | null; final: string }> = [{ view: text, final: paths.model }];
        if (tower !== null) modelOutputs.push({ view: tower, final: paths.mmproj });
        streamed.push(await streamInto(model, modelLayer, head, modelOutputs, report));
        if (projectorLayer !== undefined) {
          const projector = streamBlob(client, projectorLayer);
          const phead = await headOf(projector, projectorLayer, client);
          const pviews = phead.model === undefined ? undefined : await openViews(phead.model, { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
          try {
            const view = pviews?.mmproj?.kind === "view" ? pviews.mmproj.view : null;
            streamed.push(await streamInto(projector, projectorLayer, phead, [{ view, final: paths.mmproj }], report));
          } finally {
            await pviews?.close();
          }
        }
        report({ status: "verifying sha256 digest" });
        // every digest matched: the outputs get their names (synced when their blob was recorded whole)
        report({ status: "writing files" });
        for (const { targets } of streamed) {
          for (const t of targets) {
            await t.fh.close();
            await rename(t.partial, t.final);
          }
        }
        for (const dir of new Set(finals.map((f) => dirname(f)))) await syncDir(dir);
        for (const { record: r } of streamed) await removeResume(r);
      } finally {
        for (const { targets } of streamed) for (const t of targets) await t.fh.close().catch(() => undefined);
      }
    } finally {
      await release();
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
 * pass over the blob), or null for the blob as it is. Continues what an earlier pull of the same
 * blob and plan left (its record), and records its own progress every CHECKPOINT bytes, each time
 * after flushing the outputs. Returns the outputs whole, synced, digest checked, not yet named.
 */
async function streamInto(
  blob: BlobStream,
  layer: ManifestLayer,
  head: Head,
  outputs: ReadonlyArray<{ view: TranslatedView | null; final: string }>,
  report: (p: PullProgress) => void,
): Promise<Streamed> {
  const status = `pulling ${layer.digest.slice(7, 19)}`;
  const planned: StreamOutput[] = [];
  for (const o of outputs) if (o.view !== null) planned.push({ model: o.view.model, layout: o.view.layout });
  const plan: StreamPlan | undefined = planned.length > 0 ? planStream(head.source, planned) : undefined;
  const sizes = outputs.map((o) => o.view?.size ?? layer.size);
  const recordPath = resumeRecordOf(outputs[0]!.final);
  const base: Omit<ResumeRecord, "verified"> = {
    digest: layer.digest,
    size: layer.size,
    plan: planId(plan, sizes),
    outputs: outputs.map((o, i) => ({ file: relativeTo(dirname(recordPath), partialPathOf(o.final)), size: sizes[i]! })),
  };
  const resumed = await readResume(recordPath, base);
  const targets: Target[] = [];
  const sinks = [];
  let plain: Target | undefined;
  let kept = false;
  try {
    for (const [i, o] of outputs.entries()) {
      const partial = partialPathOf(o.final);
      const fh = await open(partial, resumed !== undefined ? "r+" : "w+");
      const t = { final: o.final, partial, fh };
      targets.push(t);
      if (resumed === undefined) await fh.truncate(sizes[i]!);
      if (o.view === null) plain = t;
      else sinks.push({ write: (at: number, bytes: Uint8Array) => writeAll(fh, bytes, at) });
    }
    if (resumed === layer.size) {
      // the blob came whole, digest checked, before this pull
      report({ status, digest: layer.digest, total: layer.size, completed: layer.size });
      kept = true;
      return { targets, record: recordPath };
    }
    const at = resumed ?? 0;
    const writer = plan !== undefined ? new StreamWriter(plan, sinks, head.source) : undefined;
    if (at > 0) writer?.resumeAt(at);
    await writer?.start();

    let recorded = at;
    let checkpoint: Promise<void> | undefined;
    const record = (verified: number) => writeResume(recordPath, { ...base, verified });
    const feed = async (offset: number, bytes: Uint8Array) => {
      if (plain !== undefined) await writeAll(plain.fh, bytes, offset);
      if (writer !== undefined) await writer.feed(offset, bytes);
      const end = offset + bytes.length;
      // where the writer holds nothing, its flushed outputs are a prefix another pull can continue
      // (never at the end: that record waits for the digest)
      if (end - recorded >= CHECKPOINT && end < layer.size && checkpoint === undefined && (writer === undefined || writer.settled)) {
        recorded = end;
        checkpoint = (async () => {
          for (const t of targets) await t.fh.datasync();
          await record(end);
        })().finally(() => (checkpoint = undefined));
      }
    };
    if (at < head.bytes.length) await feed(at, head.bytes.subarray(at));
    const from = Math.max(at, head.bytes.length);
    report({ status, digest: layer.digest, total: layer.size, completed: from });
    const files = targets.filter((t) => t !== plain).map((t) => t.fh);
    try {
      await blob.rest(feed, (completed) => report({ status, digest: layer.digest, total: layer.size, completed }), { at: from, prefix: (update) => replayPrefix(from, head.bytes, plan, files, plain?.fh, blob, update) });
    } finally {
      await checkpoint?.catch(() => undefined);
    }
    if (writer !== undefined && !writer.done) throw new GgufError("DATA_LENGTH", `internal: ${layer.digest} ended with ops not run`);
    for (const t of targets) await t.fh.sync();
    await record(layer.size);
    kept = true;
    return { targets, record: recordPath };
  } catch (e) {
    // what the network cut short is kept for the next pull; bytes that do not hash right, or
    // that the translation refused, are worth nothing to it
    const resumable = e instanceof RegistryError && (e.code === "REGISTRY_UNREACHABLE" || e.code === "BAD_REGISTRY_REPLY");
    for (const t of targets) await t.fh.close().catch(() => undefined);
    if (!resumable) {
      await removeResume(recordPath);
      for (const t of targets) await rm(t.partial, { force: true });
    }
    throw e;
  } finally {
    if (!kept) for (const t of targets) await t.fh.close().catch(() => undefined);
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
