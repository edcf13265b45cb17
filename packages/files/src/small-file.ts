import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from "node:fs";

/** What a file that is not a regular one is, in words ("a FIFO", "a directory", ...). */
export function fileKind(st: Stats): string {
  if (st.isDirectory()) return "a directory";
  if (st.isFIFO()) return "a FIFO";
  if (st.isCharacterDevice()) return "a character device";
  if (st.isBlockDevice()) return "a block device";
  if (st.isSocket()) return "a socket";
  return "not a regular file";
}

/**
 * A small file read into memory: opened without blocking (a FIFO must not wait for a writer),
 * refused (`refuse(why)`) unless it is a regular file, and read up to `max` bytes whatever its
 * size on disk says (a link to /dev/zero, or a /proc file whose size is 0, streams without end).
 * Synchronous: a file of a few KiB is read in microseconds, where five trips through libuv's
 * threads cost a busy main thread (serve --all's start reads one per model) more.
 */
export function readSmallFile(path: string, max: number, refuse: (why: string) => Error): string {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw refuse(`is ${fileKind(st)}`);
    if (st.size > max) throw refuse(`is ${st.size} bytes (expected at most ${max})`);
    // one page past the limit tells "more" apart (reads in whole pages: some /proc files refuse other sizes)
    const cap = max + 4096;
    let buf = Buffer.allocUnsafe(Math.min(cap, st.size + 4096));
    let used = 0;
    for (;;) {
      if (used > max) throw refuse(`holds more than ${max} bytes (expected at most ${max})`);
      if (used === buf.length) {
        const bigger = Buffer.allocUnsafe(Math.min(cap, buf.length * 2));
        buf.copy(bigger, 0, 0, used);
        buf = bigger;
      }
      const bytesRead = readSync(fd, buf, used, buf.length - used, used);
      if (bytesRead === 0) break;
      used += bytesRead;
    }
    return buf.toString("utf8", 0, used);
  } finally {
    closeSync(fd);
  }
}
