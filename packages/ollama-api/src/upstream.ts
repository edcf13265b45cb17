import { Agent, request, type IncomingHttpHeaders, type IncomingMessage } from "node:http";

/** A router model's state, as llama-server's GET /models reports it. */
export type RouterStatus = "loaded" | "loading" | "unloaded" | "sleeping" | "downloading" | "failed";

/**
 * HTTP to the llama-server router behind the API: one keep-alive agent (a new connection per
 * request would add a round trip to every token stream), the API key on every request.
 * llama-server closes a connection idle for 5 s (cpp-httplib's keep-alive timeout); idle
 * sockets are let go after 2 s, and a request whose reused socket was closed under it, before
 * any answer, is sent again on a new connection outside the pool.
 */
export class Upstream {
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 64, timeout: 2_000 });

  constructor(
    readonly url: string,
    private readonly apiKey?: string,
  ) {}

  /** Sends one request; the response streams (the caller reads or destroys it). */
  send(method: string, path: string, body?: Buffer | string | object, opts: { headers?: IncomingHttpHeaders; signal?: AbortSignal } = {}): Promise<IncomingMessage> {
    const payload = body === undefined ? undefined : typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    const headers: Record<string, string | string[] | undefined> = { ...opts.headers };
    if (payload !== undefined) {
      headers["content-type"] ??= "application/json";
      headers["content-length"] = String(Buffer.byteLength(payload));
    }
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    // The retry goes on a connection of its own: from the pool it could get another socket that
    // llama-server closed meanwhile (it closes idle ones often: seen here on one reused socket in
    // three, after an error answer), and a second stale socket made the request fail.
    const attempt = (retry: boolean): Promise<IncomingMessage> =>
      new Promise((resolve, reject) => {
        const req = request(`${this.url}${path}`, { method, headers, agent: retry ? this.agent : false, signal: opts.signal }, resolve);
        req.on("error", (e: NodeJS.ErrnoException) => {
          if (retry && req.reusedSocket && (e.code === "ECONNRESET" || e.code === "EPIPE")) resolve(attempt(false));
          else reject(e);
        });
        req.end(payload);
      });
    return attempt(true);
  }

  /** A request whose answer is read whole: status and text. */
  async call(method: string, path: string, body?: object, signal?: AbortSignal): Promise<{ status: number; text: string }> {
    const res = await this.send(method, path, body, { signal });
    return { status: res.statusCode ?? 0, text: await readText(res) };
  }

  /** Every router model's status, by its names (the preset section and its aliases). */
  async statuses(): Promise<Map<string, RouterStatus>> {
    const { status, text } = await this.call("GET", "/models");
    if (status !== 200) throw new Error(`llama-server GET /models: HTTP ${status}: ${text.slice(0, 200)}`);
    const out = new Map<string, RouterStatus>();
    for (const m of (JSON.parse(text) as { data?: Array<{ id: string; aliases?: string[]; status?: { value?: string; failed?: boolean } }> }).data ?? []) {
      const value = (m.status?.failed && m.status.value === "unloaded" ? "failed" : (m.status?.value ?? "unloaded")) as RouterStatus;
      for (const n of [m.id, ...(m.aliases ?? [])]) out.set(n, value);
    }
    return out;
  }

  close(): void {
    this.agent.destroy();
  }
}

/**
 * Whether the router's error answer says the model's instance was gone when the request came, or
 * went before answering a byte, so the request reached no model that answers and may be sent again
 * once the model is loaded again. The router knew it was not running; or, in the window between an
 * instance's death and the router's reaping it (seen under load right after a kill), cpp-httplib
 * could not connect to it ("Could not establish connection") or connected and read nothing before
 * the connection dropped ("Failed to read connection"; a read timeout is another error, "Read
 * timeout", and is not resent). Generation changes nothing on the server, so sending it again is
 * safe; the callers send it again once at most.
 */
export function instanceGone(text: string): boolean {
  return /is not running|failed to load|is not loaded|proxy error: (?:Could not establish connection|Failed to read connection)/.test(text);
}

export async function readText(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}
