/**
 * A client of Ollama's registry protocol, which is OCI distribution v2: the manifest of
 * `<namespace>/<model>:<tag>` and the blobs it names, over HTTPS (`--insecure`: HTTP). A 401
 * with `WWW-Authenticate: Bearer realm=…,service=…,scope=…` is answered by asking the realm for
 * a token and retrying once, as Ollama's makeRequestWithRetry does: the request is signed with
 * the user's ~/.ollama/id_ed25519 as Ollama signs it (see registry-auth), anonymous when there
 * is no such key. The token goes only to the registry's own host, never to the CDN a blob
 * redirects to.
 */
import { authorization, defaultIdentityPath, newNonce, readIdentity, tokenUrl } from "./registry-auth";
import { MediaType } from "./media-types";
import { fullName, type ModelName } from "./name";
import { parseManifest, type Manifest } from "./store";
import { canonicalDigest } from "./digest";
import { fetchRefusesPort } from "./fetch-ports";

export type RegistryErrorCode =
  | "REGISTRY_UNREACHABLE" // no network, no such host, connection refused or reset
  | "NOT_IN_REGISTRY" // the registry has no such model or tag (404)
  | "REGISTRY_REFUSED" // any other HTTP error, or a challenge we cannot answer
  | "INSECURE_PROTOCOL" // an http:// name without --insecure
  | "BAD_IDENTITY" // ~/.ollama/id_ed25519 is there but is not an unencrypted OpenSSH ed25519 key
  | "BAD_REGISTRY_REPLY"; // a manifest that is not one, a range answered with other bytes

export class RegistryError extends Error {
  constructor(
    readonly code: RegistryErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = "RegistryError";
  }
}

/** A manifest is a few hundred bytes; more than this is not one. */
const MAX_MANIFEST_BYTES = 1 << 20;

export interface RegistryOptions {
  /** Plain HTTP instead of HTTPS. */
  insecure?: boolean;
  /** Whether the name was written with an explicit `http://`. */
  httpScheme?: boolean;
  signal?: AbortSignal;
  /** The key token requests are signed with (default ~/.ollama/id_ed25519; none there: anonymous). */
  identity?: string;
}

interface Challenge {
  realm: string;
  service?: string;
  scope?: string;
}

/** `Bearer realm="…",service="…",scope="…"` → its fields; undefined for any other scheme. */
export function parseChallenge(header: string | null): Challenge | undefined {
  if (!header || !/^bearer\s/i.test(header)) return undefined;
  const fields: Record<string, string> = {};
  // quoted values may hold commas (scope="repository:a/b:pull,push")
  for (const m of header.slice(7).matchAll(/([a-zA-Z_]+)=(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g)) fields[m[1]!.toLowerCase()] = m[2] ?? m[3] ?? "";
  return fields.realm ? { realm: fields.realm, service: fields.service, scope: fields.scope } : undefined;
}

/** The registry that serves one model name. */
export class RegistryClient {
  readonly base: URL;
  readonly repository: string;
  private token: string | undefined;

  constructor(
    readonly name: ModelName,
    private readonly opts: RegistryOptions = {},
  ) {
    if (opts.httpScheme && !opts.insecure) {
      throw new RegistryError("INSECURE_PROTOCOL", `${fullName(name)}: an http:// registry needs --insecure (the model would come over plain HTTP)`);
    }
    this.base = new URL(`${opts.insecure ? "http" : "https"}://${name.host}`);
    this.repository = `${name.namespace}/${name.model}`;
  }

  /** The manifest's exact bytes (written to the store as they are) and its parsed form. */
  async manifest(): Promise<{ bytes: Uint8Array; manifest: Manifest }> {
    const url = new URL(`/v2/${this.repository}/manifests/${this.name.tag}`, this.base);
    const res = await this.request(url, { headers: { accept: MediaType.manifest } });
    const bytes = await readCapped(res, MAX_MANIFEST_BYTES, url);
    const manifest = (() => {
      try {
        return parseManifest(Buffer.from(bytes).toString("utf8"), `the manifest of ${fullName(this.name)}`);
      } catch (e) {
        throw new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: ${(e as Error).message}`, { url: url.href });
      }
    })();
    for (const l of [...manifest.layers, ...(manifest.config ? [manifest.config] : [])]) {
      // the store names blobs sha256-<lower-case hex>; another spelling would be a second name for one blob
      if (canonicalDigest(l.digest) !== l.digest) throw new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: layer digest ${JSON.stringify(l.digest)} is not sha256:<lower-case hex>`);
    }
    return { bytes, manifest };
  }

  /**
   * Where the blob's bytes are: the registry's blob URL, or the URL it redirects to on another
   * host (a CDN), resolved once so the range requests of every part go straight there.
   */
  async blobLocation(digest: string): Promise<URL> {
    const url = new URL(`/v2/${this.repository}/blobs/${digest}`, this.base);
    let at = url;
    for (let hops = 0; hops < 10; hops++) {
      const res = await this.request(at, { method: "GET", headers: { range: "bytes=0-0" }, redirect: "manual" });
      await res.body?.cancel().catch(() => undefined);
      const location = res.headers.get("location");
      if (res.status < 300 || res.status >= 400 || !location) return at;
      at = new URL(location, at);
    }
    throw new RegistryError("REGISTRY_REFUSED", `${url.href}: more than 10 redirects`, { url: url.href });
  }

  /**
   * GET of bytes [start, end] (inclusive) of a blob at `url`: the open response, checked to be
   * those bytes (206 with the matching Content-Range, or 200 for the whole blob from 0).
   */
  async range(url: URL, start: number, end: number, total: number, signal?: AbortSignal): Promise<Response> {
    const res = await this.request(url, { headers: { range: `bytes=${start}-${end}` }, signal });
    if (res.status === 206) {
      const cr = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.headers.get("content-range") ?? "");
      if (cr && Number(cr[1]) === start && Number(cr[2]) === end) return res;
    } else if (res.status === 200 && start === 0 && end === total - 1) {
      return res;
    }
    await res.body?.cancel().catch(() => undefined);
    throw new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: asked for bytes ${start}-${end}, got HTTP ${res.status} ${res.headers.get("content-range") ?? "(no Content-Range)"}`, { url: url.href });
  }

  /** The Authorization a request to `url` carries: the registry's token, only to the registry's own host. */
  authorizationFor(url: URL): string | undefined {
    return this.token && url.host === this.base.host ? `Bearer ${this.token}` : undefined;
  }

  /** One request, with the registry's token when it is the registry's host; a 401 challenge is answered once. */
  private async request(url: URL, init: RequestInit = {}): Promise<Response> {
    const signal = anySignal(this.opts.signal, init.signal ?? undefined);
    for (let attempt = 0; ; attempt++) {
      const headers = new Headers(init.headers);
      if (this.token && url.host === this.base.host) headers.set("authorization", `Bearer ${this.token}`);
      const res = await send(url, { ...init, headers, signal });
      if (res.status === 401 && attempt === 0) {
        const challenge = parseChallenge(res.headers.get("www-authenticate"));
        await res.body?.cancel().catch(() => undefined);
        if (!challenge) throw new RegistryError("REGISTRY_REFUSED", `${url.href}: 401 unauthorized, with no Bearer challenge to answer`, { url: url.href });
        this.token = await this.fetchToken(challenge, signal);
        continue;
      }
      if (res.status === 404) {
        await res.body?.cancel().catch(() => undefined);
        throw new RegistryError("NOT_IN_REGISTRY", `${fullName(this.name)}: the registry ${this.base.host} has no such model or tag (404 for ${url.pathname})`, { url: url.href });
      }
      if (res.status >= 400) {
        const text = (await res.text().catch(() => "")).slice(0, 300).replace(/\s+/g, " ").trim();
        throw new RegistryError("REGISTRY_REFUSED", `${url.href}: HTTP ${res.status}${text ? `: ${text}` : ""}`, { url: url.href, status: res.status });
      }
      return res;
    }
  }

  /** Asks the challenge's realm for a token; only a realm on the registry's own host is asked (a token must not leak elsewhere). */
  private async fetchToken(c: Challenge, signal: AbortSignal | undefined): Promise<string> {
    let realm: URL;
    try {
      realm = new URL(c.realm);
    } catch {
      throw new RegistryError("REGISTRY_REFUSED", `${this.base.host}: the auth challenge's realm ${JSON.stringify(c.realm)} is not a URL`);
    }
    if (realm.host !== this.base.host) {
      throw new RegistryError("REGISTRY_REFUSED", `${this.base.host}: the auth challenge sends us to ${realm.host}, another host; refused`);
    }
    const identity = await readIdentity(this.opts.identity ?? defaultIdentityPath());
    const url = tokenUrl(realm, c.service, c.scope, Math.floor(Date.now() / 1000), newNonce());
    const res = await send(new URL(url), { signal, headers: identity ? { authorization: authorization(identity, url) } : {} });
    if (res.status >= 400) {
      const text = (await res.text().catch(() => "")).slice(0, 300).replace(/\s+/g, " ").trim();
      const as = identity ? `signed with ${identity.path}` : `anonymous: no key at ${this.opts.identity ?? defaultIdentityPath()}`;
      throw new RegistryError("REGISTRY_REFUSED", `${realm.origin}${realm.pathname}: token request (${as}) refused with HTTP ${res.status}${text ? `: ${text}` : ""}`, { status: res.status });
    }
    const body = (await res.json().catch(() => ({}))) as { token?: unknown; access_token?: unknown };
    const token = typeof body.token === "string" ? body.token : typeof body.access_token === "string" ? body.access_token : undefined;
    if (!token) throw new RegistryError("REGISTRY_REFUSED", `${realm.origin}${realm.pathname}: the token reply holds no token`);
    return token;
  }
}

/** fetch, with a failure to connect put in one line that names the host and the likely cause. */
async function send(url: URL, init: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    throw unreachable(url, e);
  }
}

/** Node's fetch reports "fetch failed" with the system error as its cause. */
export function unreachable(url: URL, e: unknown): RegistryError {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  const code = cause?.code ?? (e as { code?: string }).code;
  const why: Record<string, string> = {
    ENOTFOUND: "no such host, or no network",
    EAI_AGAIN: "name lookup failed: no network?",
    ECONNREFUSED: "connection refused: nothing listens there",
    ECONNRESET: "the connection was reset",
    ENETUNREACH: "network unreachable",
    EHOSTUNREACH: "host unreachable",
    ETIMEDOUT: "timed out",
    UND_ERR_CONNECT_TIMEOUT: "connection timed out",
    UND_ERR_SOCKET: "the connection was closed",
    EPROTO: "TLS handshake failed (an HTTP-only registry needs --insecure)",
  };
  const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
  if (fetchRefusesPort(port) || /bad port/i.test(cause?.message ?? "")) {
    // fetch refused it before connecting: nothing about the registry, everything about the port
    return new RegistryError(
      "REGISTRY_UNREACHABLE",
      `cannot reach ${url.host}: port ${port} is one of the ports fetch() refuses to connect to (the Fetch standard's bad ports), whatever listens there; put the registry on another port`,
      { url: url.href, code: "BAD_PORT" },
    );
  }
  const text = (code && why[code]) ?? cause?.message ?? (e as Error).message;
  return new RegistryError("REGISTRY_UNREACHABLE", `cannot reach ${url.host}: ${text}${code ? ` (${code})` : ""}`, { url: url.href, code });
}

/** The body, refused beyond `max` bytes. */
async function readCapped(res: Response, max: number, url: URL): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let n = 0;
  for await (const chunk of bodyChunks(res)) {
    n += chunk.length;
    if (n > max) {
      await res.body?.cancel().catch(() => undefined);
      throw new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: more than ${max} bytes, not a manifest`, { url: url.href });
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function anySignal(a: AbortSignal | undefined, b: AbortSignal | undefined): AbortSignal | undefined {
  if (!a) return b;
  if (!b) return a;
  return AbortSignal.any([a, b]);
}

/** A response body's chunks as they arrive. */
export async function* bodyChunks(res: Response): AsyncGenerator<Uint8Array> {
  if (!res.body) return;
  const reader = res.body.getReader();
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        finished = true;
        return;
      }
      yield value;
    }
  } finally {
    // a consumer that stops early closes the connection rather than leave it open
    if (!finished) await reader.cancel().catch(() => undefined);
  }
}
