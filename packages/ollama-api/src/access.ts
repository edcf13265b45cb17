import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { hostname, networkInterfaces } from "node:os";
import { isIP } from "node:net";
import { isLoopback } from "@compat/server-bridge";

/**
 * Origins a browser page may call from, as Ollama allows them (envconfig.AllowedOrigins):
 * OLLAMA_ORIGINS (comma-separated, `*` as a wildcard), then localhost, 127.0.0.1 and 0.0.0.0
 * on any port, and app://, file://, tauri://, vscode-webview://, vscode-file://.
 */
export function allowedOrigins(env: Record<string, string | undefined>): string[] {
  const out = (env.OLLAMA_ORIGINS ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  for (const h of ["localhost", "127.0.0.1", "0.0.0.0"]) out.push(`http://${h}`, `https://${h}`, `http://${h}:*`, `https://${h}:*`);
  out.push("app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*");
  return out;
}

const ALLOW_HEADERS = [
  "Authorization", "Content-Type", "User-Agent", "Accept", "X-Requested-With", "OpenAI-Beta",
  "x-stainless-arch", "x-stainless-async", "x-stainless-custom-poll-interval", "x-stainless-helper-method", "x-stainless-lang",
  "x-stainless-os", "x-stainless-package-version", "x-stainless-poll-helper", "x-stainless-retry-count", "x-stainless-runtime",
  "x-stainless-runtime-version", "x-stainless-timeout",
].join(",");

/** What the access checks decided: go on, or the request was already answered. */
type Verdict = "next" | "answered";

export interface AccessOptions {
  origins: string[];
  /** The address the API listens on: on loopback, Host headers of other names are refused (DNS rebinding). */
  listenHost: string;
  apiKey?: string;
}

/**
 * CORS as Ollama's gin-contrib/cors setup (a listed origin is echoed back, any other origin is
 * refused with 403, preflights answer 204), Ollama's Host check for a loopback listener, and
 * the API key when one is set (`Authorization: Bearer KEY`; GET / and preflights are exempt).
 */
export function checkAccess(req: IncomingMessage, res: ServerResponse, opts: AccessOptions, matchers: RegExp[]): Verdict {
  const origin = req.headers.origin;
  const host = req.headers.host ?? "";
  if (isLoopback(opts.listenHost) && !allowedHost(host)) {
    res.writeHead(403).end();
    return "answered";
  }
  if (origin && origin !== `http://${host}` && origin !== `https://${host}`) {
    if (!matchers.some((m) => m.test(origin))) {
      res.writeHead(403).end();
      return "answered";
    }
    res.setHeader("access-control-allow-origin", origin);
    res.setHeader("vary", "Origin");
    if (req.method === "OPTIONS") {
      res.writeHead(204, {
        "access-control-allow-methods": "GET,POST,PUT,PATCH,DELETE,HEAD,OPTIONS",
        "access-control-allow-headers": ALLOW_HEADERS,
        "access-control-max-age": "43200",
      });
      res.end();
      return "answered";
    }
  }
  if (req.method === "OPTIONS") {
    res.writeHead(204).end();
    return "answered";
  }
  if (opts.apiKey && !(req.url === "/" && (req.method === "GET" || req.method === "HEAD")) && !keyMatches(req.headers.authorization, opts.apiKey)) {
    const text = JSON.stringify({ error: "unauthorized: send the API key as Authorization: Bearer KEY" });
    res.writeHead(401, { "content-type": "application/json; charset=utf-8", "www-authenticate": "Bearer" }).end(text);
    return "answered";
  }
  return "next";
}

/** `*` in an allowed origin matches any run of characters. */
export function originMatchers(origins: string[]): RegExp[] {
  return origins.map((o) => new RegExp(`^${o.split("*").map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`));
}

function keyMatches(header: string | undefined, key: string): boolean {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? "");
  if (!m) return false;
  const a = Buffer.from(m[1]!.trim());
  const b = Buffer.from(key);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Ollama's allowedHost: IP literals of this machine or private networks, localhost, this host's name, *.localhost, *.local, *.internal. */
function allowedHost(hostHeader: string): boolean {
  let host = hostHeader.toLowerCase();
  const colon = host.lastIndexOf(":");
  if (host.startsWith("[")) host = host.slice(1, host.indexOf("]"));
  // one colon is a port (an IPv6 address has at least two): asking isIP would compile Node's
  // IPv6 pattern on the first request, which is most of its time
  else if (colon > 0 && (host.indexOf(":") === colon || isIP(host) === 0)) host = host.slice(0, colon);
  if (host === "" || host === "localhost" || host === hostname().toLowerCase()) return true;
  if (["localhost", "local", "internal"].some((tld) => host.endsWith(`.${tld}`))) return true;
  if (isIP(host) === 0) return false;
  if (isLoopback(host) || host === "0.0.0.0" || host === "::" || isPrivate(host)) return true;
  return Object.values(networkInterfaces()).some((list) => list?.some((a) => a.address.toLowerCase() === host));
}

function isPrivate(ip: string): boolean {
  if (ip.includes(":")) return /^f[cd]/i.test(ip);
  const [a, b] = ip.split(".").map(Number) as [number, number];
  return a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168);
}
