import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import { fileKind } from "@compat/files";
import { BridgeError } from "./errors";

/** The most a key file may hold: keys are short, and a device such as /dev/zero never ends. */
export const KEY_FILE_MAX_BYTES = 64 * 1024;

export interface KeyFile {
  text: string;
  /** Its permission bits (`0o600`). */
  mode: number;
  /** Group or others may read or change it (what ssh refuses for a private key). */
  tooOpen: boolean;
}

/**
 * Reads a file of API keys, named by `flag` in every error: only a regular file, at most
 * KEY_FILE_MAX_BYTES. It is opened without blocking and checked on the open descriptor, so a
 * FIFO (whose open would wait for a writer, and whose read never ends), a device or a directory
 * is refused at once, whatever the path pointed to a moment before.
 */
export function readKeyFile(path: string, flag: string): KeyFile {
  const fail = (why: string) => new BridgeError("BAD_ARGUMENT", `${flag} ${path}: ${why}`, { arg: path, flag });
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (e) {
    throw fail(`cannot open it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw fail(`not a regular file (${fileKind(st)}); expected a file holding the key`);
    if (st.size > KEY_FILE_MAX_BYTES) throw fail(`${st.size} bytes: larger than a key file may be (${KEY_FILE_MAX_BYTES} bytes)`);
    const buf = Buffer.alloc(KEY_FILE_MAX_BYTES + 1);
    let n = 0;
    for (let got; n < buf.length && (got = readSync(fd, buf, n, buf.length - n, n)) > 0; ) n += got;
    // it grew since fstat
    if (n > KEY_FILE_MAX_BYTES) throw fail(`larger than a key file may be (${KEY_FILE_MAX_BYTES} bytes)`);
    const mode = st.mode & 0o777;
    return { text: buf.subarray(0, n).toString("utf8"), mode, tooOpen: (mode & 0o077) !== 0 };
  } catch (e) {
    if (e instanceof BridgeError) throw e;
    throw fail(`cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  } finally {
    closeSync(fd);
  }
}

/**
 * The one API key of a key file of ours (`serve --api-key-file`): its text with one trailing
 * line end taken off and surrounding spaces and tabs trimmed. A key travels in an HTTP header and
 * llama-server splits LLAMA_API_KEY at commas, so a line break, another control character or a
 * comma inside it is refused rather than silently making other keys.
 */
export function apiKeyOf(file: KeyFile, path: string, flag: string): string {
  const fail = (why: string) => new BridgeError("BAD_ARGUMENT", `${flag} ${path}: ${why}`, { arg: path, flag });
  const key = file.text.replace(/\r?\n$/, "").replace(/^[ \t]+|[ \t]+$/g, "");
  if (key === "") throw fail("the file is empty (expected the API key)");
  if (/[\r\n]/.test(key)) throw fail("the key has a line break inside it (expected the key on one line)");
  if (/[\x00-\x1f\x7f]/.test(key)) throw fail("the key holds a control character");
  if (key.includes(",")) throw fail("the key holds a comma, which llama-server reads as a separator between keys");
  return key;
}
