/**
 * How `export` writes into a folder it does not own: it keeps a record of what it made there
 * (ExportRecord, a hidden JSON file), replaces only that (or anything with --force), never
 * writes through a link (every file is made under a fresh name and renamed into place, which
 * replaces a link instead of following it), and removes the temp files an export killed
 * mid-write left behind.
 */
import { lstat, mkdir, readdir, readFile, symlink, unlink } from "node:fs/promises";
import { join, relative, resolve, sep } from "node:path";
import { kernelRangeCopier, processAlive, replaceAtomically, tempFileOwner, writeFileAtomic } from "@compat/files";
import { readGguf, writeGguf } from "@compat/gguf";
import { alignedBytes, nativeFileCopy } from "@compat/tensor-ops";
import { CliError } from "../errors";

/** What export made in a folder, as paths relative to it. */
export interface ExportRecord {
  version: 1;
  /** Every file export placed, and how: "symlink", "copy" (a GGUF copy) or "file" (a configuration it wrote). */
  files: Record<string, "symlink" | "copy" | "file">;
  /** Each exported model, under its Ollama name. */
  models: Record<string, RecordedModel>;
}

export interface RecordedModel {
  layout: string;
  /** The model's files, relative to the folder (its text GGUF first). */
  files: string[];
  /** Its section of llama-server's --models-preset file. */
  preset: string;
  /** llama-server's arguments for it (model, projector, context, sampling, stop words, alias), as `serve` gives them. */
  args: string[];
}

const RECORD_FILE = ".ollama-compat-export.json";

/** `DIR/.ollama-compat-export.json`: what an earlier export made there (empty when none did). */
export async function readRecord(root: string, force: boolean): Promise<ExportRecord> {
  const path = join(root, RECORD_FILE);
  const st = await lstat(path).catch(() => undefined);
  const empty: ExportRecord = { version: 1, files: {}, models: {} };
  if (st === undefined) return empty;
  const refuse = (why: string) => {
    if (force) return empty;
    throw new CliError("error", `${path}: ${why}; it is where export keeps what it made in ${root} (pass --force to start it anew)`);
  };
  if (!st.isFile()) return refuse("not a regular file");
  try {
    const r = JSON.parse(await readFile(path, "utf8")) as ExportRecord;
    if (r.version !== 1 || typeof r.files !== "object" || typeof r.models !== "object" || r.files === null || r.models === null) return refuse("not a record this version reads");
    return r;
  } catch (e) {
    return refuse(`unreadable (${(e as Error).message.split("\n")[0]})`);
  }
}

export async function writeRecord(root: string, record: ExportRecord): Promise<void> {
  await writeFileAtomic(join(root, RECORD_FILE), JSON.stringify(record, null, 2) + "\n");
}

/** Earlier versions of export copied into a fixed `.NAME.gguf.partial`. */
const PARTIAL = /^\.(.+\.gguf)\.partial$/;

/**
 * Removes what exports killed mid-write left in `dirs`: temp files of processes that are gone
 * (@compat/gguf's `.NAME.PID.HEX.tmp`) and earlier versions' `.NAME.gguf.partial`. Only files
 * and links are removed (a link itself, never what it points to: the folder is the user's).
 * Returns the paths removed.
 */
export async function sweepLeftovers(dirs: Iterable<string>): Promise<string[]> {
  const removed: string[] = [];
  for (const dir of new Set(dirs)) {
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const owner = tempFileOwner(name);
      const leftover = owner ? owner.pid !== process.pid && !processAlive(owner.pid) : PARTIAL.test(name);
      if (!leftover) continue;
      const path = join(dir, name);
      const st = await lstat(path).catch(() => undefined);
      if (!st || !(st.isFile() || st.isSymbolicLink())) continue;
      await unlink(path).catch(() => undefined);
      removed.push(path);
    }
  }
  return removed;
}

/** `path` relative to `root`, with `/` separators (the record's keys). */
export function relativeTo(root: string, path: string): string {
  return relative(resolve(root), resolve(path)).split(sep).join("/");
}

/**
 * Whether export may put a file at `target`: nothing is there, or what is there is what it
 * recorded making (a link it made is still a link, a file a file), or --force. A directory is
 * never replaced. Throws a one-line error naming the path and the flag otherwise.
 */
export async function checkReplaceable(root: string, target: string, record: ExportRecord, force: boolean): Promise<void> {
  const st = await lstat(target).catch(() => undefined);
  if (st === undefined) return;
  if (st.isDirectory()) throw new CliError("error", `${target}: a folder is where the file goes; move it away (export never replaces a folder)`);
  const made = record.files[relativeTo(root, target)];
  const same = made === "symlink" ? st.isSymbolicLink() : made !== undefined && st.isFile();
  if (same || force) return;
  const what = st.isSymbolicLink() ? "a link" : st.isFile() ? "a file" : "something";
  throw new CliError("error", `${target}: ${what} export did not make is already there; move it away or pass --force to replace it`);
}

/**
 * Makes the folders from `root` down to `dir`, following no link: each one is created, or
 * must already be a real folder. Something else in the way is an error naming it and --force
 * (which replaces a file or link there; never a folder's contents).
 */
export async function makeFolders(root: string, dir: string, force: boolean): Promise<void> {
  const parts = relativeTo(root, dir).split("/").filter((p) => p !== "" && p !== ".");
  let at = resolve(root);
  for (const part of parts) {
    at = join(at, part);
    const st = await lstat(at).catch(() => undefined);
    if (st?.isDirectory()) continue;
    if (st !== undefined) {
      const what = st.isSymbolicLink() ? "a link" : "a file";
      if (!force) throw new CliError("error", `${at}: ${what} is where the model's folder goes; move it away or pass --force to replace it`);
      await unlink(at);
    }
    try {
      await mkdir(at);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw new CliError("error", `${at}: cannot make the model's folder (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
      // made by a concurrent export meanwhile: fine if it is a folder
      if (!(await lstat(at)).isDirectory()) throw new CliError("error", `${at}: something else appeared where the model's folder goes`);
    }
  }
}

/** A link at `target` to `source` (absolute). */
export async function placeLink(source: string, target: string): Promise<void> {
  // made beside it and renamed over it: a link there is replaced, not followed
  await replaceAtomically(target, (tmp) => symlink(resolve(source), tmp));
}

/**
 * A copy of the GGUF `source` at `target` through @compat/gguf's atomic writer: a temp file of
 * its own (created exclusively, so no link is followed, and removed on a signal by the
 * binary's exit handler), in-kernel range copies (extents shared where the file system
 * can; on ext4 direct writes in aligned blocks instead), fsync, rename over the target. The bytes are the source's (a translation we wrote is
 * laid out the same when written again).
 */
export async function placeCopy(source: string, target: string, onProgress?: (written: number, total: number) => void): Promise<void> {
  const model = await readGguf(source);
  try {
    const copyRange = kernelRangeCopier(nativeFileCopy());
    await writeGguf(model, target, { shareBlocks: true, alignedBytes, ...(copyRange ? { copyRange } : {}), ...(onProgress ? { onProgress } : {}) });
  } finally {
    await model.close();
  }
}
