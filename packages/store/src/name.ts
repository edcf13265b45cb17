/**
 * Ollama model names: `[host/][namespace/]model[:tag]`, defaults registry.ollama.ai,
 * library, latest (Ollama's types/model/name.go). A name maps to the manifest file
 * manifests/<host>/<namespace>/<model>/<tag>.
 */
export interface ModelName {
  host: string;
  namespace: string;
  model: string;
  tag: string;
}

export const DEFAULT_HOST = "registry.ollama.ai";
export const DEFAULT_NAMESPACE = "library";
export const DEFAULT_TAG = "latest";

/** Splits a reference and fills in the defaults; null when a part is empty or has characters Ollama rejects. */
export function parseModelName(ref: string): ModelName | null {
  // Control characters never belong in a name (a log line or a path could carry them on).
  if (/[\u0000-\u001f\u007f]/.test(ref)) return null;
  // A scheme (https://) only says how to pull; the store ignores it.
  let rest = ref.trim().replace(/^[a-z]+:\/\//, "");
  let tag = "";
  // A colon after the last slash is the tag (a colon before it belongs to host:port).
  if (rest.lastIndexOf(":") > rest.lastIndexOf("/")) {
    tag = rest.slice(rest.lastIndexOf(":") + 1);
    rest = rest.slice(0, rest.lastIndexOf(":"));
    if (tag === "") return null;
  }
  const parts = rest.split("/");
  if (parts.length > 3) return null;
  const model = parts.pop() ?? "";
  const namespace = parts.pop();
  const host = parts.pop();
  const name: ModelName = {
    host: host ?? DEFAULT_HOST,
    namespace: namespace ?? DEFAULT_NAMESPACE,
    model,
    tag: tag || DEFAULT_TAG,
  };
  return isValidName(name) ? name : null;
}

export function isValidName(n: ModelName): boolean {
  return validPart("host", n.host) && validPart("namespace", n.namespace) && validPart("model", n.model) && validPart("tag", n.tag);
}

function validPart(kind: "host" | "namespace" | "model" | "tag", s: string): boolean {
  if (s.length < 1 || s.length > (kind === "host" ? 350 : 80)) return false;
  if (!/^[A-Za-z0-9_]/.test(s)) return false;
  for (const c of s.slice(1)) {
    if (/[A-Za-z0-9_-]/.test(c)) continue;
    if (c === "." && kind !== "namespace") continue;
    if (c === ":" && kind === "host") continue;
    return false;
  }
  return true;
}

/** The path of the manifest below `manifests/`, as path segments. */
export function manifestSegments(n: ModelName): [string, string, string, string] {
  return [n.host, n.namespace, n.model, n.tag];
}

/** The shortest name that resolves back to the same manifest, as `ollama list` shows it. */
export function displayName(n: ModelName): string {
  let prefix = "";
  if (n.host.toLowerCase() !== DEFAULT_HOST) prefix = `${n.host}/${n.namespace}/`;
  else if (n.namespace.toLowerCase() !== DEFAULT_NAMESPACE) prefix = `${n.namespace}/`;
  return `${prefix}${n.model}:${n.tag}`;
}

/** The full name: host/namespace/model:tag. */
export function fullName(n: ModelName): string {
  return `${n.host}/${n.namespace}/${n.model}:${n.tag}`;
}

/**
 * `migrate` keeps each replaced manifest as a manifest of its own, the rollback record, under
 * this host prefix: `ollama-compat-undo.registry.ollama.ai/library/gemma3:4b` for gemma3:4b. A
 * manifest under manifests/ keeps its blobs safe from Ollama's startup prune, and Ollama lists
 * and runs it as a model of that name (no registry answers to that host). ollama-compat's own
 * listings leave these records out.
 */
export const ROLLBACK_HOST_PREFIX = "ollama-compat-undo.";

/** The rollback record's name for `n`, or null when the host would grow past Ollama's 350 characters. */
export function rollbackName(n: ModelName): ModelName | null {
  const r = { ...n, host: ROLLBACK_HOST_PREFIX + n.host };
  return isValidName(r) ? r : null;
}

export function isRollbackName(n: ModelName): boolean {
  return n.host.toLowerCase().startsWith(ROLLBACK_HOST_PREFIX);
}

/** The model a rollback record restores. */
export function rolledBackName(r: ModelName): ModelName {
  return { ...r, host: r.host.slice(ROLLBACK_HOST_PREFIX.length) };
}

/**
 * The order models are listed in: by name, comparing UTF-16 code units (as `<` does). Not
 * localeCompare: its first call loads ICU's collation data, 15-35 ms on the start of every
 * command that lists the store (serve --all before it is ready, ls).
 */
export function byName(a: { name: string }, b: { name: string }): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
