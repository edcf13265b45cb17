/**
 * A range request over plain HTTP/1.1 whose body the kernel reads straight into the caller's
 * buffers (net.Socket `onread`): no allocation, copy or stream object per 64 KiB chunk, which is
 * most of what fetch costs a download from a registry on the same machine or network (the
 * CPU-bound case; over the internet the network is slower than either). Only the simplest reply
 * is taken: 206 (or 200 for the whole blob) with its Content-Length and no transfer coding;
 * anything else is "unsupported" before a body byte was given, and the caller asks fetch, which
 * knows the rest of HTTP (challenges, redirects, chunked bodies).
 */
import { connect, type Socket } from "node:net";
import { RegistryError } from "./registry";

export interface RawSink {
  /**
   * Where the next bytes go: never empty, also right after took() (the socket takes its next read
   * buffer then, and reads into it once resumed); more room than a read of the header (16 KiB)
   * when the request starts.
   */
  space(): Uint8Array;
  /** `n` bytes arrived at the start of the last space(); a promise pauses the socket until it settles. */
  took(n: number): Promise<void> | undefined;
}

/** The most header bytes a reply may have. */
const MAX_HEADER = 64 << 10;

/** GETs bytes [start, end] (inclusive) of `url` (http:) into `sink`; "unsupported" when the reply is not a plain range reply. */
export function rawRange(url: URL, start: number, end: number, total: number, authorization: string | undefined, sink: RawSink, signal?: AbortSignal): Promise<"done" | "unsupported"> {
  return new Promise((resolve, reject) => {
    let header: Buffer | undefined = Buffer.alloc(0);
    let left = end - start + 1;
    let settled = false;
    const finish = (e: unknown, result?: "done" | "unsupported") => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      socket.destroy();
      if (e === undefined) resolve(result!);
      else reject(e);
    };
    const onAbort = () => finish(signal!.reason ?? new Error("aborted"));
    const cut = (why: string) => finish(new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: ${why}`, { url: url.href }));
    const body = (n: number) => {
      if (n > left) return cut("more bytes than asked for");
      left -= n;
      const wait = n > 0 ? sink.took(n) : undefined;
      const next = () => {
        if (left === 0) finish(undefined, "done");
        else if (socket.isPaused()) socket.resume();
      };
      if (wait === undefined) return next();
      socket.pause();
      wait.then(next, finish);
    };
    let last: Uint8Array = new Uint8Array(0);
    const socket: Socket = connect({
      host: url.hostname.replace(/^\[|\]$/g, ""),
      port: Number(url.port || 80),
      onread: {
        buffer: () => (last = header !== undefined ? Buffer.alloc(16 << 10) : sink.space()),
        callback: (n: number): boolean => {
          if (settled) return false;
          if (header === undefined) {
            body(n);
            return !socket.isPaused();
          }
          header = Buffer.concat([header, last.subarray(0, n)]);
          const endOfHeader = header.indexOf("\r\n\r\n");
          if (endOfHeader < 0) {
            if (header.length > MAX_HEADER) cut("a reply header without end");
            return true;
          }
          const text = header.toString("latin1", 0, endOfHeader);
          const rest = header.subarray(endOfHeader + 4);
          header = undefined;
          if (!plainRangeReply(text, start, end, total)) {
            finish(undefined, "unsupported");
            return false;
          }
          // the body bytes that came with the header, copied (at most one small read), the socket paused meanwhile
          socket.pause();
          (async () => {
            for (let at = 0; at < rest.length && !settled; ) {
              const space = sink.space();
              const n = Math.min(space.length, rest.length - at);
              if (n > left) throw new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: more bytes than asked for`, { url: url.href });
              space.set(rest.subarray(at, at + n));
              at += n;
              left -= n;
              await sink.took(n);
            }
          })().then(() => (left === 0 ? finish(undefined, "done") : socket.resume()), finish);
          return false;
        },
      },
    });
    signal?.addEventListener("abort", onAbort, { once: true });
    socket.on("connect", () => {
      const lines = [`GET ${url.pathname}${url.search} HTTP/1.1`, `Host: ${url.host}`, `Range: bytes=${start}-${end}`, "Accept-Encoding: identity", "Connection: close"];
      if (authorization !== undefined) lines.push(`Authorization: ${authorization}`);
      socket.write(lines.join("\r\n") + "\r\n\r\n");
    });
    socket.on("error", (e: Error) => finish(new RegistryError("REGISTRY_UNREACHABLE", `cannot reach ${url.host}: ${e.message}`, { url: url.href, code: (e as NodeJS.ErrnoException).code })));
    socket.on("end", () => (left === 0 ? finish(undefined, "done") : cut(`the connection ended ${left} bytes short`)));
  });
}

/** Whether a reply header is exactly the range asked for, with nothing between its bytes and ours. */
function plainRangeReply(text: string, start: number, end: number, total: number): boolean {
  const [status, ...fields] = text.split("\r\n");
  const h = new Map(fields.map((l) => [l.slice(0, l.indexOf(":")).trim().toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
  if (h.has("transfer-encoding") || (h.get("content-encoding") ?? "identity") !== "identity") return false;
  if (Number(h.get("content-length")) !== end - start + 1) return false;
  if (/^HTTP\/1\.[01] 206 /.test(status + " ")) {
    const cr = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(h.get("content-range") ?? "");
    return cr !== null && Number(cr[1]) === start && Number(cr[2]) === end;
  }
  return /^HTTP\/1\.[01] 200 /.test(status + " ") && start === 0 && end === total - 1;
}
