/**
 * Ollama's signed token request against a real registry configured for token authentication:
 * Debian's docker-registry with `auth: token` (it accepts only JWTs signed by the certificate in
 * its rootcertbundle), behind a small front on the same host that answers the realm. The token
 * server here checks each request as ollama.com's would: the `<ssh public key>:<signature>`
 * header verified with node:crypto over `GET,<url>,<base64 of the hex sha256 of no body>`, the
 * key the authorized one; only then does it issue an RS256 JWT the registry verifies. The keys
 * are real OpenSSH keys made by ssh-keygen.
 */
import { execFileSync } from "node:child_process";
import { createHash, createPrivateKey, createPublicKey, randomBytes, sign, verify } from "node:crypto";
import { createServer, request, type Server } from "node:http";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startOciRegistry, type OciRegistry } from "@compat/testkit";
import { ModelStore, pullModel, readIdentity, RegistryError } from "@compat/store";
import { tempDirs } from "./helpers";

const temp = tempDirs();
const SERVICE = "compat-test";
const ISSUER = "compat-test-issuer";
let registry: OciRegistry;
let front: Server;
let frontHost: string;
let keys: string;
let ref: string;
/** The token requests the realm saw: their query keys in order, and whether the signature held. */
const seen: Array<{ keys: string[]; verified: boolean }> = [];

beforeAll(async () => {
  keys = await temp();
  for (const k of ["id_ed25519", "stranger"]) execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", k, "-f", join(keys, k)]);
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", join(keys, "token.key"), "-out", join(keys, "token.crt"), "-days", "2", "-subj", "/CN=compat-token"], { stdio: "ignore" });
  const authorized = (await readFile(join(keys, "id_ed25519.pub"), "utf8")).split(" ")[1]!;
  const certDer = (await readFile(join(keys, "token.crt"), "utf8")).replace(/-----[^-]+-----|\s+/g, "");
  const tokenKey = createPrivateKey(await readFile(join(keys, "token.key")));

  // seeded without auth, then served with it from the same storage
  const storage = join(await temp(), "storage");
  const seed = await startOciRegistry({ storage });
  ref = (await seed.pushModel({ name: "library/secret:1", model: randomBytes(1 << 16), params: { num_ctx: 512 } })).ref.replace(seed.host, "HOST");
  await seed.stop();

  front = createServer((req, res) => {
    const url = `http://${frontHost}${req.url}`;
    if (!req.url!.startsWith("/v2/token?")) {
      // everything else goes to the registry as it came
      const up = request({ host: "127.0.0.1", port: Number(registry.host.split(":")[1]), method: req.method, path: req.url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode!, r.headers);
        r.pipe(res);
      });
      up.on("error", () => res.destroy());
      req.pipe(up);
      return;
    }
    const query = new URL(url).searchParams;
    const [pub, sig] = (req.headers.authorization ?? "").split(":");
    let verified = false;
    if (pub && sig) {
      const wire = Buffer.from(pub, "base64");
      const raw = wire.subarray(wire.length - 32);
      const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" });
      const text = `GET,${url},${Buffer.from(createHash("sha256").update("").digest("hex")).toString("base64")}`;
      verified = pub === authorized && verify(null, Buffer.from(text), key, Buffer.from(sig, "base64"));
    }
    const fresh = Math.abs(Number(query.get("ts")) - Date.now() / 1000) < 600 && /^[A-Za-z0-9_-]{22}$/.test(query.get("nonce") ?? "");
    seen.push({ keys: [...query.keys()], verified });
    if (!verified || !fresh || query.get("service") !== SERVICE) return void res.writeHead(401, { "content-type": "application/json" }).end('{"error":"unauthorized: the request is not signed by a known key"}');
    const scope = /^repository:([^:]+):pull$/.exec(query.get("scope") ?? "");
    const now = Math.floor(Date.now() / 1000);
    const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
    const signing = `${b64({ typ: "JWT", alg: "RS256", x5c: [certDer] })}.${b64({ iss: ISSUER, sub: "tester", aud: SERVICE, exp: now + 300, nbf: now - 10, iat: now, jti: randomBytes(8).toString("hex"), access: scope ? [{ type: "repository", name: scope[1], actions: ["pull"] }] : [] })}`;
    const token = `${signing}.${sign("sha256", Buffer.from(signing), tokenKey).toString("base64url")}`;
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ token }));
  });
  await new Promise<void>((r) => front.listen(0, "127.0.0.1", r));
  frontHost = `127.0.0.1:${(front.address() as { port: number }).port}`;
  registry = await startOciRegistry({ storage, tokenAuth: { realm: `http://${frontHost}/v2/token`, service: SERVICE, issuer: ISSUER, rootCertBundle: join(keys, "token.crt") } });
  ref = ref.replace("HOST", frontHost);
}, 180_000);
afterAll(async () => {
  await registry?.stop();
  front?.close();
});

describe("signed registry auth (~/.ollama/id_ed25519, as Ollama signs its token requests)", () => {
  it("the registry refuses a request without a token: the realm is asked, signed with the user's key, and the pull succeeds", async () => {
    const bare = await fetch(`http://${frontHost}/v2/library/secret/manifests/1`);
    expect(bare.status).toBe(401);
    expect(bare.headers.get("www-authenticate")).toContain(`realm="http://${frontHost}/v2/token"`);
    const root = await temp();
    seen.length = 0;
    await pullModel(ref, { root, insecure: true, identity: join(keys, "id_ed25519") });
    expect(seen[0]).toEqual({ keys: ["nonce", "scope", "service", "ts"], verified: true }); // Go's url.Values order
    expect((await new ModelStore(root).resolve(ref)).params).toEqual({ num_ctx: 512 });
  });

  it("another key, or none: the realm refuses, and the error says which key was used", async () => {
    const stranger = await pullModel(ref, { root: await temp(), insecure: true, identity: join(keys, "stranger") }).then(() => undefined, (e: RegistryError) => e);
    expect(stranger).toBeInstanceOf(RegistryError);
    expect(stranger!.code).toBe("REGISTRY_REFUSED");
    expect(stranger!.message).toContain(`signed with ${join(keys, "stranger")}`);
    expect(stranger!.message).toContain("401");
    const none = await pullModel(ref, { root: await temp(), insecure: true, identity: join(keys, "missing") }).then(() => undefined, (e: RegistryError) => e);
    expect(none!.message).toContain(`anonymous: no key at ${join(keys, "missing")}`);
  });

  it("keys Ollama could not use either are refused with a reason: a passphrase, an RSA key", async () => {
    execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "secret", "-f", join(keys, "locked")]);
    execFileSync("ssh-keygen", ["-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", join(keys, "rsa")]);
    await expect(readIdentity(join(keys, "locked"))).rejects.toMatchObject({ code: "BAD_IDENTITY", message: expect.stringContaining("encrypted") });
    await expect(readIdentity(join(keys, "rsa"))).rejects.toMatchObject({ code: "BAD_IDENTITY", message: expect.stringContaining("ssh-rsa") });
    // the public key sent is the one ssh-keygen wrote
    const id = await readIdentity(join(keys, "id_ed25519"));
    expect(id!.publicKey.toString("base64")).toBe((await readFile(join(keys, "id_ed25519.pub"), "utf8")).split(" ")[1]);
  });
});
