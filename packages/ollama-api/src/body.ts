import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError, badRequest } from "./errors";

/**
 * What a refused body may still send once its answer is out, and for how long: enough for a
 * client that is still writing to read the answer, not a way to keep the server reading.
 */
const DRAIN_LIMIT = 8 << 20;
const LINGER_MS = 2_000;

/**
 * Request bodies in memory, bounded twice: each body by `perBody` (413), and all bodies being
 * read or handled at once by `total` (503), so that many connections with unfinished large
 * bodies cannot take the machine's memory. A body's bytes count from its first chunk until
 * its response is done; a refused body's bytes are let go at once, and its connection is
 * closed after the answer (what it still sends is read and dropped, up to DRAIN_LIMIT).
 */
export class BodyBudget {
  private heldBytes = 0;

  constructor(
    readonly perBody: number,
    readonly total: number,
  ) {}

  /** Bytes of request bodies held now. */
  get held(): number {
    return this.heldBytes;
  }

  /** The whole body of `req`, or an ApiError (413, 503, 400 when the client went away). */
  read(req: IncomingMessage, res: ServerResponse): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      let chunks: Buffer[] = [];
      let size = 0;
      let settled = false;
      const release = () => {
        this.heldBytes -= size;
        size = 0;
      };
      res.once("close", release);
      const refuse = (e: ApiError) => {
        settled = true;
        req.off("data", onData);
        chunks = [];
        release();
        discard(req, res);
        reject(e);
      };
      const onData = (c: Buffer) => {
        if (size + c.length > this.perBody) return refuse(new ApiError(413, `request body larger than ${this.perBody} bytes`));
        if (this.heldBytes + c.length > this.total) {
          res.setHeader("retry-after", "1");
          return refuse(new ApiError(503, `server busy: request bodies in progress hold ${this.heldBytes} bytes, the limit is ${this.total}; try again`));
        }
        size += c.length;
        this.heldBytes += c.length;
        chunks.push(c);
      };
      const declared = Number(req.headers["content-length"]);
      if (declared > this.perBody) return refuse(new ApiError(413, `request body of ${declared} bytes: larger than ${this.perBody} bytes`));
      req.on("data", onData);
      req.once("end", () => {
        if (settled) return;
        settled = true;
        const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
        chunks = [];
        resolve(body);
      });
      req.once("error", (e) => {
        if (!settled) refuse(new ApiError(400, e.message));
      });
      req.once("close", () => {
        if (!settled && !req.complete) refuse(new ApiError(400, "the client closed the connection before the whole request body came"));
      });
    });
  }
}

/**
 * A body the server will not read: nothing more of it is read until the answer is out (the
 * client's sending waits on TCP meanwhile), and the answer closes the connection lingering, as
 * nginx and Apache close one: the answer and a FIN first, then what the client still sends is
 * read and dropped, up to DRAIN_LIMIT bytes or LINGER_MS, before the socket is cut. Node closes
 * a `connection: close` socket as soon as the answer is flushed (socket.destroySoon); with the
 * client's bytes still arriving, the kernel then answers them with a reset, and a client whose
 * process had not read the answer yet (a loaded machine) lost it: it saw only the reset.
 */
export function discard(req: IncomingMessage, res: ServerResponse): void {
  if (!res.headersSent) res.setHeader("connection", "close");
  const socket = req.socket;
  req.pause();
  const cut = () => socket.destroy();
  socket.destroySoon = () => {
    socket.end();
    let dropped = 0;
    req.on("data", (c: Buffer) => {
      dropped += c.length;
      if (dropped > DRAIN_LIMIT) cut();
    });
    req.resume();
    const linger = setTimeout(cut, LINGER_MS);
    linger.unref();
    socket.once("close", () => clearTimeout(linger));
  };
}

/** A response body from llama-server, read whole up to `max` bytes. */
export async function readUpTo(res: IncomingMessage, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of res) {
    size += (c as Buffer).length;
    if (size > max) {
      res.destroy();
      throw new Error(`llama-server's answer is larger than ${max} bytes`);
    }
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}

/** A request body: a JSON object. */
export function jsonBody(text: string): Record<string, unknown> {
  if (text.trim() === "") throw badRequest("missing request body");
  let v: unknown;
  try {
    v = parseJson(text);
  } catch (e) {
    throw e instanceof ApiError ? e : badRequest((e as Error).message);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new ApiError(400, "expected a JSON object");
  return v as Record<string, unknown>;
}

/** A UTF-16 surrogate that is not half of a pair (in `u` mode a pair is one code point, not Cs). */
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * JSON.parse, and a 400 for a lone surrogate (`"\ud800"`) in any string or key: JSON's grammar
 * allows the escape, but it is no Unicode text, and llama-server's parser refuses it.
 */
export function parseJson(text: string): unknown {
  return JSON.parse(text, (key, value: unknown) => {
    if (LONE_SURROGATE.test(key) || (typeof value === "string" && LONE_SURROGATE.test(value))) {
      throw badRequest(`invalid JSON: a lone UTF-16 surrogate in ${typeof value === "string" ? "a string" : "a key"} (a \\uD800-\\uDFFF escape not part of a pair); send valid Unicode text`);
    }
    return value;
  });
}
