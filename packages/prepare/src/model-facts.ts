import { createHash } from "node:crypto";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { TranslationProfile } from "@compat/handlers";
import { readSmallFile, writeFileAtomic } from "@compat/files";
import type { FileStatus } from "@compat/views";
import type { ResolvedModel } from "@compat/store";
import { TRANSLATOR_VERSION } from "./cache";
import { sameVersion, versionNow, versionOf, type FileVersion } from "./digest-memo";
import type { PreparedModel } from "./preparer";

/**
 * What a model's header says about how it is served, remembered so that a restart of
 * `serve --all` writes the router's presets without parsing ten headers (a 262,144-token
 * vocabulary each): the facts modelArgs depends on, and which of its files are translated.
 * Blobs are content-addressed, so a record is keyed by the model's digests, the profile and
 * the translator; it is used only while every file it was made from has the same version
 * (device, inode, size, mtime, ctime), as the digest memo checks a blob.
 */
export interface RecordedFacts {
  status: FileStatus;
  handlers: string[];
  architecture: string;
  embedding: boolean;
  hasChatTemplate: boolean;
  /** The text file is translated (else llama.cpp reads the blob as it is). */
  translated: boolean;
  /** The projector: none, a file llama.cpp reads as it is, or a translated view. */
  mmproj: "none" | "file" | "view";
}

/** Bumped when the record's shape or meaning changes: an older record is then ignored and rewritten. */
const RECORD_VERSION = 1;
/** A record is a few hundred bytes: a larger file in its place is not one. */
const RECORD_MAX_BYTES = 1 << 20;

interface FactsRecord {
  v: number;
  key: string;
  sources: Array<{ path: string; version: FileVersion }>;
  facts: RecordedFacts;
}

/** The files a model's facts are made from: its model file and projector layers. */
function sourcesOf(m: ResolvedModel): string[] {
  return [m.modelPath, ...m.projectors];
}

/** Records of RecordedFacts in one folder, a small JSON file per model version. */
export class FactsRecords {
  constructor(readonly dir: string) {}

  private key(m: ResolvedModel, profile: TranslationProfile): string | undefined {
    // a plain GGUF file has no digest: its facts are read every time
    if (m.modelDigest === undefined) return undefined;
    const id = JSON.stringify({ v: RECORD_VERSION, translator: TRANSLATOR_VERSION, profile, model: m.modelDigest, projectors: m.projectors });
    return createHash("sha256").update(id).digest("hex").slice(0, 40);
  }

  /** The facts recorded for this version of the model, or undefined (none, unreadable, corrupt, or made from other bytes). */
  async read(m: ResolvedModel, profile: TranslationProfile): Promise<RecordedFacts | undefined> {
    const key = this.key(m, profile);
    if (key === undefined) return undefined;
    let record: FactsRecord;
    try {
      // a regular file of a few hundred bytes, or nothing: a FIFO or a device in its place is no record
      record = JSON.parse(readSmallFile(join(this.dir, `${key}.json`), RECORD_MAX_BYTES, (why) => new Error(why))) as FactsRecord;
    } catch {
      return undefined;
    }
    if (!isRecord(record) || record.v !== RECORD_VERSION || record.key !== key) return undefined;
    const paths = sourcesOf(m);
    if (record.sources.length !== paths.length || record.sources.some((s, i) => s.path !== paths[i])) return undefined;
    for (const s of record.sources) {
      const now = versionNow(s.path);
      if (now === undefined || !sameVersion(now, s.version)) return undefined;
    }
    return record.facts;
  }

  /**
   * Records the facts of a model just parsed. The versions are taken before the caller's
   * parse (`versions`), so a file changed meanwhile leaves a record that no longer matches.
   * A failure to write is no error: the next start parses again.
   */
  async write(m: ResolvedModel, profile: TranslationProfile, versions: FileVersion[], facts: RecordedFacts): Promise<void> {
    const key = this.key(m, profile);
    if (key === undefined) return;
    const paths = sourcesOf(m);
    const record: FactsRecord = { v: RECORD_VERSION, key, sources: paths.map((path, i) => ({ path, version: versions[i]! })), facts };
    try {
      await mkdir(this.dir, { recursive: true });
      await writeFileAtomic(join(this.dir, `${key}.json`), JSON.stringify(record));
    } catch {
      // a read-only cache: the facts are parsed again next time
    }
  }

  /** The versions of the model's files now (before parsing it), for write. */
  static versions(m: ResolvedModel): Promise<FileVersion[]> {
    return Promise.all(sourcesOf(m).map((path) => versionOf({ path })));
  }
}

/** The facts of a prepared model (what the mount or the cache made of it). */
export function factsOf(p: PreparedModel, mmproj: RecordedFacts["mmproj"]): RecordedFacts {
  return { status: p.status, handlers: p.handlers, architecture: p.architecture, embedding: p.embedding, hasChatTemplate: p.hasChatTemplate, translated: p.translated, mmproj };
}

function isRecord(r: unknown): r is FactsRecord {
  if (typeof r !== "object" || r === null) return false;
  const o = r as Partial<FactsRecord>;
  const f = o.facts as Partial<RecordedFacts> | undefined;
  return (
    typeof o.v === "number" &&
    typeof o.key === "string" &&
    Array.isArray(o.sources) &&
    o.sources.every((s) => typeof s === "object" && s !== null && typeof s.path === "string" && typeof s.version === "object" && s.version !== null) &&
    typeof f === "object" &&
    f !== null &&
    typeof f.status === "string" &&
    Array.isArray(f.handlers) &&
    f.handlers.every((h) => typeof h === "string") &&
    typeof f.architecture === "string" &&
    typeof f.embedding === "boolean" &&
    typeof f.hasChatTemplate === "boolean" &&
    typeof f.translated === "boolean" &&
    (f.mmproj === "none" || f.mmproj === "file" || f.mmproj === "view")
  );
}

/**
 * The PreparedModel of a model whose facts are recorded, with the files it is served as: what
 * a parse and plan would give, without either.
 */
export function preparedFromFacts(resolved: ResolvedModel, facts: RecordedFacts, files: { modelPath: string; mmproj?: string | undefined }): PreparedModel {
  return {
    resolved,
    modelPath: files.modelPath,
    translated: facts.translated,
    cacheHit: false,
    ...(files.mmproj !== undefined ? { mmproj: files.mmproj } : {}),
    status: facts.status,
    handlers: facts.handlers,
    architecture: facts.architecture,
    embedding: facts.embedding,
    hasChatTemplate: facts.hasChatTemplate,
  };
}

/** Whether llama.cpp reads every file of the model as it is (nothing to mount). */
export function servedAsIs(facts: RecordedFacts): boolean {
  return !facts.translated && facts.mmproj !== "view";
}
