/**
 * Ollama's signed token request (server/auth.go getAuthorizationToken, auth/auth.go Sign): the
 * realm of a registry's Bearer challenge is asked for a token with `service`, each `scope`, a
 * unix `ts` and a random `nonce` added to its query (in Go's url.Values order: keys sorted), and
 * an `Authorization: <public key>:<signature>` header, where the public key is the base64 SSH
 * wire form of the user's ed25519 key (~/.ollama/id_ed25519, the one ollama.com knows) and the
 * signature is ed25519 over `GET,<that URL>,<base64 of the hex sha256 of an empty body>`.
 */
import { createHash, createPrivateKey, randomBytes, sign, type KeyObject } from "node:crypto";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { RegistryError } from "./registry";

/** An ed25519 key read from an OpenSSH private key file. */
export interface Identity {
  /** The public key in SSH wire form (what an authorized_keys line holds, base64). */
  publicKey: Buffer;
  privateKey: KeyObject;
  path: string;
}

/** Where Ollama keeps its key: ~/.ollama/id_ed25519. */
export function defaultIdentityPath(): string {
  return join(homedir(), ".ollama", "id_ed25519");
}

/** The key at `path`, or undefined when there is no file (the token is then asked for anonymously). */
export async function readIdentity(path: string): Promise<Identity | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new RegistryError("BAD_IDENTITY", `${path}: cannot read the key: ${(e as Error).message}`, { path });
  }
  return { ...parseOpenSshEd25519(text, path), path };
}

/**
 * An `-----BEGIN OPENSSH PRIVATE KEY-----` file (PROTOCOL.key: "openssh-key-v1\0", cipher,
 * kdf, kdf options, one public key, then the private section) holding one unencrypted ed25519
 * key, as `ssh-keygen -t ed25519 -N ""` and Ollama write it.
 */
export function parseOpenSshEd25519(text: string, path: string): { publicKey: Buffer; privateKey: KeyObject } {
  const bad = (why: string) => new RegistryError("BAD_IDENTITY", `${path}: ${why}`, { path });
  const m = /-----BEGIN OPENSSH PRIVATE KEY-----([\s\S]*?)-----END OPENSSH PRIVATE KEY-----/.exec(text);
  if (!m) throw bad("not an OpenSSH private key (no BEGIN OPENSSH PRIVATE KEY block)");
  const data = Buffer.from(m[1]!.replace(/\s+/g, ""), "base64");
  const magic = "openssh-key-v1\0";
  if (data.subarray(0, magic.length).toString("latin1") !== magic) throw bad("not an openssh-key-v1 key");
  let at = magic.length;
  const u32 = () => {
    if (at + 4 > data.length) throw bad(`cut short at byte ${at}`);
    const v = data.readUInt32BE(at);
    at += 4;
    return v;
  };
  const str = () => {
    const n = u32();
    if (at + n > data.length) throw bad(`a field of ${n} bytes at byte ${at} runs past the end`);
    const s = data.subarray(at, at + n);
    at += n;
    return s;
  };
  const cipher = str().toString("latin1");
  str(); // kdf name
  str(); // kdf options
  if (cipher !== "none") throw bad(`the key is encrypted (${cipher}); give a key without a passphrase, as Ollama makes it`);
  if (u32() !== 1) throw bad("holds more than one key");
  const publicKey = Buffer.from(str());
  const priv = str();
  at = 0;
  const section = priv;
  const read32 = () => {
    if (at + 4 > section.length) throw bad("private section cut short");
    const v = section.readUInt32BE(at);
    at += 4;
    return v;
  };
  const field = () => {
    const n = read32();
    if (at + n > section.length) throw bad("private section cut short");
    const s = section.subarray(at, at + n);
    at += n;
    return s;
  };
  if (read32() !== read32()) throw bad("the private section's check numbers differ (a corrupt or encrypted key)");
  const type = field().toString("latin1");
  if (type !== "ssh-ed25519") throw bad(`a ${type} key; Ollama signs with ed25519 (ssh-keygen -t ed25519)`);
  const pk = field();
  const sk = field();
  if (pk.length !== 32 || sk.length !== 64 || !sk.subarray(32).equals(pk)) throw bad("the ed25519 key's parts do not fit together");
  const privateKey = createPrivateKey({ key: { kty: "OKP", crv: "Ed25519", d: sk.subarray(0, 32).toString("base64url"), x: pk.toString("base64url") }, format: "jwk" });
  return { publicKey, privateKey };
}

/** Go's url.QueryEscape: letters, digits and `-_.~` stay, a space is `+`, every other byte `%XX`. */
function queryEscape(s: string): string {
  return encodeURIComponent(s)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replace(/%20/g, "+");
}

/**
 * The token URL Ollama asks (registryChallenge.URL): the realm with its own query, plus
 * service, each space-separated scope, ts and nonce, encoded as Go's url.Values.Encode (keys
 * sorted, values in the order added).
 */
export function tokenUrl(realm: URL, service: string | undefined, scope: string | undefined, ts: number, nonce: string): string {
  const values: Array<[string, string]> = [...realm.searchParams.entries()];
  values.push(["service", service ?? ""]);
  for (const s of (scope ?? "").split(" ")) values.push(["scope", s]);
  values.push(["ts", String(ts)], ["nonce", nonce]);
  const keys = [...new Set(values.map(([k]) => k))].sort();
  const query = keys.flatMap((k) => values.filter(([x]) => x === k).map(([, v]) => `${queryEscape(k)}=${queryEscape(v)}`)).join("&");
  return `${realm.protocol}//${realm.host}${realm.pathname}?${query}`;
}

/** A fresh nonce as auth.NewNonce makes it: 16 random bytes, base64url without padding. */
export function newNonce(): string {
  return randomBytes(16).toString("base64url");
}

/** What Ollama signs for a GET of `url` with no body: `GET,<url>,<base64 of hex sha256("")>`. */
export function signedText(url: string): string {
  const emptyHash = createHash("sha256").digest("hex");
  return `GET,${url},${Buffer.from(emptyHash).toString("base64")}`;
}

/** The Authorization value: `<base64 public key (wire form)>:<base64 ed25519 signature>`. */
export function authorization(id: Identity, url: string): string {
  const signature = sign(null, Buffer.from(signedText(url)), id.privateKey);
  return `${id.publicKey.toString("base64")}:${signature.toString("base64")}`;
}
