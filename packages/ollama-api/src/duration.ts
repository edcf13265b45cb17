import { badRequest } from "./errors";

// "\u00b5s" is "µs" (the micro sign): escaped, the source stays ASCII, and so does the CLI bundle,
// which V8 would otherwise read and compile at every start as a two-byte string (src/bin.ts).
const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, "\u00b5s": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Go's largest time.Duration (2^63-1 ns, about 292 years) in ms: a keep_alive this long or longer is for ever. */
export const FOREVER_MS = 2 ** 63 / 1e6;

/**
 * `keep_alive` (and OLLAMA_KEEP_ALIVE) in milliseconds, as Ollama reads it (api.Duration): a
 * number of seconds or a Go duration ("5m", "1h30m", "0"); negative means forever (Infinity),
 * and so does anything as long as Go's largest duration or longer ("9999999999h", 1e300), where
 * Go would overflow. A bare number in a string is taken as seconds, as OLLAMA_KEEP_ALIVE allows.
 */
export function parseKeepAlive(value: unknown): number | undefined {
  const ms = parse(value);
  return ms !== undefined && ms >= FOREVER_MS ? Infinity : ms;
}

function parse(value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "number" && !Number.isNaN(value)) return value < 0 ? Infinity : value * 1000;
  if (typeof value !== "string") throw badRequest(`keep_alive: unsupported type ${typeof value} (expected a number of seconds or a duration such as "5m")`);
  const s = value.trim();
  if (/^[-+]?\d+(\.\d+)?$/.test(s)) return parse(Number(s));
  const m = /^([-+]?)((?:\d+(?:\.\d+)?(?:ns|us|\u00b5s|ms|s|m|h))+)$/.exec(s);
  if (!m) throw badRequest(`time: invalid duration "${value}"`);
  let ms = 0;
  for (const part of m[2]!.matchAll(/(\d+(?:\.\d+)?)(ns|us|\u00b5s|ms|s|m|h)/g)) ms += Number(part[1]) * UNIT_MS[part[2]!]!;
  return m[1] === "-" ? Infinity : ms;
}
