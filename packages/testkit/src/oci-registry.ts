/**
 * A real OCI registry for the pull tests: Debian's `docker-registry` (CNCF distribution 2.x),
 * started on a free loopback port over a temp folder, and seeded with Ollama-format models
 * through the registry's own upload API (POST an upload, PUT its bytes with the digest, PUT the
 * manifest), exactly as `ollama push` would leave them there.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Ollama's media types, spelled out here so the testkit does not depend on the store package. */
const OLLAMA_MEDIA = {
  manifest: "application/vnd.docker.distribution.manifest.v2+json",
  config: "application/vnd.docker.container.image.v1+json",
  model: "application/vnd.ollama.image.model",
  projector: "application/vnd.ollama.image.projector",
  template: "application/vnd.ollama.image.template",
  system: "application/vnd.ollama.image.system",
  params: "application/vnd.ollama.image.params",
  license: "application/vnd.ollama.image.license",
} as const;

export interface RegistryLayer {
  mediaType: string;
  digest: string;
  size: number;
}

export interface RegistryModelSpec {
  /** `namespace/model:tag` in the registry (the host is the registry's). */
  name: string;
  /** The GGUF: a file path or its bytes. */
  model: string | Uint8Array;
  projector?: string | Uint8Array;
  template?: string;
  system?: string;
  params?: Record<string, unknown>;
  license?: string;
  config?: Record<string, unknown>;
}

export interface PushedModel {
  /** `127.0.0.1:PORT/namespace/model:tag`: the name to pull it by. */
  ref: string;
  /** The manifest's bytes as the registry stores and serves them. */
  manifest: Uint8Array;
  config: RegistryLayer;
  layers: RegistryLayer[];
}

export interface OciRegistry {
  /** `http://127.0.0.1:PORT` */
  url: string;
  /** `127.0.0.1:PORT`, the host part of a model name. */
  host: string;
  /** The registry's storage folder (filesystem driver). */
  storage: string;
  /** Uploads one blob into `repo` (`namespace/model`); returns its digest. */
  pushBlob(repo: string, bytes: Uint8Array): Promise<string>;
  /** Uploads an Ollama model: its blobs, then its manifest. */
  pushModel(spec: RegistryModelSpec): Promise<PushedModel>;
  /** The file the registry serves a blob from: writing into it makes the registry serve other bytes under the same digest. */
  blobDataPath(digest: string): string;
  stop(): Promise<void>;
}

export interface OciRegistryOptions {
  /** A storage folder to serve (e.g. one another registry was seeded into); kept at stop. Default: a fresh one, removed at stop. */
  storage?: string;
  /**
   * Token authentication (distribution's `auth: token`): every request needs a Bearer JWT from
   * `realm`, issued by `issuer` for `service` and signed by a key whose certificate is in `rootCertBundle`.
   */
  tokenAuth?: { realm: string; service: string; issuer: string; rootCertBundle: string };
}

/** Where Debian's package puts the binary (`dpkg -L docker-registry`); else PATH. */
function registryBinary(): string {
  return existsSync("/usr/bin/docker-registry") ? "/usr/bin/docker-registry" : "docker-registry";
}

/**
 * Starts `docker-registry serve` on 127.0.0.1 with a port the kernel picks (the registry logs
 * the address it listens on), storage in a fresh temp folder. Fails with a clear message when
 * the package is missing (scripts/system-deps.sh installs it).
 */
export async function startOciRegistry(opts: OciRegistryOptions = {}): Promise<OciRegistry> {
  const dir = await mkdtemp(join(tmpdir(), "compat-registry-"));
  const storage = opts.storage ?? join(dir, "storage");
  const config = join(dir, "config.yml");
  const a = opts.tokenAuth;
  const auth = a ? ["auth:", "  token:", `    realm: ${a.realm}`, `    service: ${a.service}`, `    issuer: ${a.issuer}`, `    rootcertbundle: ${a.rootCertBundle}`] : [];
  await writeFile(
    config,
    ["version: 0.1", "log:", "  level: info", "storage:", "  filesystem:", `    rootdirectory: ${storage}`, "  delete:", "    enabled: true", "http:", "  addr: 127.0.0.1:0", ...auth, ""].join("\n"),
  );
  const child = spawn(registryBinary(), ["serve", config], { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const host = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`docker-registry did not say where it listens within 60 s:\n${log.slice(-2000)}`)), 60_000);
    const onData = (d: Buffer) => {
      log += d.toString();
      const m = /listening on (127\.0\.0\.1:\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot start docker-registry (apt-get install docker-registry; scripts/system-deps.sh installs it): ${e.message}`));
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`docker-registry exited (${code}) before listening:\n${log.slice(-2000)}`));
    });
  });
  // keep draining its log so a full pipe never blocks it
  child.stdout!.resume();
  child.stderr!.resume();
  const url = `http://${host}`;

  const pushBlob = async (repo: string, bytes: Uint8Array): Promise<string> => {
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const start = await fetch(`${url}/v2/${repo}/blobs/uploads/`, { method: "POST" });
    await start.arrayBuffer();
    const location = start.headers.get("location");
    if (start.status !== 202 || !location) throw new Error(`upload start for ${repo}: HTTP ${start.status}`);
    const put = new URL(location, url);
    put.searchParams.set("digest", digest);
    const done = await fetch(put, { method: "PUT", headers: { "content-type": "application/octet-stream" }, body: Buffer.from(bytes) });
    const text = await done.text();
    if (done.status !== 201) throw new Error(`upload of ${digest} to ${repo}: HTTP ${done.status} ${text}`);
    return digest;
  };

  const pushModel = async (spec: RegistryModelSpec): Promise<PushedModel> => {
    const colon = spec.name.lastIndexOf(":");
    const repo = colon > spec.name.lastIndexOf("/") ? spec.name.slice(0, colon) : spec.name;
    const tag = colon > spec.name.lastIndexOf("/") ? spec.name.slice(colon + 1) : "latest";
    const layers: RegistryLayer[] = [];
    const add = async (mediaType: string, data: string | Uint8Array, isPath: boolean) => {
      const bytes = isPath ? await readFile(data as string) : typeof data === "string" ? Buffer.from(data, "utf8") : data;
      layers.push({ mediaType, digest: await pushBlob(repo, bytes), size: bytes.length });
    };
    await add(OLLAMA_MEDIA.model, spec.model, typeof spec.model === "string");
    if (spec.projector !== undefined) await add(OLLAMA_MEDIA.projector, spec.projector, typeof spec.projector === "string");
    if (spec.template !== undefined) await add(OLLAMA_MEDIA.template, spec.template, false);
    if (spec.system !== undefined) await add(OLLAMA_MEDIA.system, spec.system, false);
    if (spec.params !== undefined) await add(OLLAMA_MEDIA.params, JSON.stringify(spec.params), false);
    if (spec.license !== undefined) await add(OLLAMA_MEDIA.license, spec.license, false);
    const configBytes = Buffer.from(
      JSON.stringify({ model_format: "gguf", model_family: "", model_families: null, model_type: "", file_type: "F16", architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: layers.map((l) => l.digest) }, ...spec.config }),
    );
    const config = { mediaType: OLLAMA_MEDIA.config, digest: await pushBlob(repo, configBytes), size: configBytes.length };
    const manifest = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: OLLAMA_MEDIA.manifest, config, layers }));
    const r = await fetch(`${url}/v2/${repo}/manifests/${tag}`, { method: "PUT", headers: { "content-type": OLLAMA_MEDIA.manifest }, body: Buffer.from(manifest) });
    const text = await r.text();
    if (r.status !== 201) throw new Error(`manifest ${spec.name}: HTTP ${r.status} ${text}`);
    return { ref: `${host}/${repo}:${tag}`, manifest, config, layers };
  };

  const blobDataPath = (digest: string): string => {
    const hex = digest.replace(/^sha256:/, "");
    return join(storage, "docker", "registry", "v2", "blobs", "sha256", hex.slice(0, 2), hex, "data");
  };

  const stop = async (): Promise<void> => {
    await stopChild(child);
    await rm(dir, { recursive: true, force: true });
  };
  return { url, host, storage, pushBlob, pushModel, blobDataPath, stop };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise<void>((r) => child.once("exit", () => r()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await gone;
  clearTimeout(timer);
}
