/**
 * `pull NAME --to DIR` (issue 38): an Ollama gemma3 vision blob of BENCH_PULL_MIB (default 2048)
 * from a local registry (Debian's docker-registry, as the tests run it), translated while it
 * downloads, against `curl` of the same blob to a file; the pull's peak RSS; and the disk it
 * wrote against the translated size (one translated copy, never the blob plus a translation).
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync, mkdirSync, rmSync } from "node:fs";
import { stat } from "node:fs/promises";
import { Readable } from "node:stream";
import { join } from "node:path";
import { openViews } from "@compat/views";
import { startOciRegistry } from "@compat/testkit";
import { writeVisionBlob } from "./files";

export interface PullBenchContext {
  root: string;
  dir: string;
  runs: number;
  /** Runs a command under /usr/bin/time: its peak RSS (KiB) and the blocks it wrote (512-byte units). */
  run(cmd: string, args: string[], env?: Record<string, string>): { maxRssKiB: number; outBlocks?: number } | undefined;
  race(fns: Array<() => unknown>, runs: number, before?: () => void): Promise<number[]>;
  row(r: { scenario: string; ours: string; baseline: string; ratio: number; target: string; pass: boolean | undefined }): void;
  ms(x: number): string;
}

/** Uploads a file as a blob through the registry's upload API, streamed (a 2 GiB blob is not read into memory). */
async function pushFile(url: string, repo: string, path: string): Promise<{ digest: string; size: number }> {
  const hash = createHash("sha256");
  for await (const c of createReadStream(path, { highWaterMark: 8 << 20 })) hash.update(c as Buffer);
  const digest = `sha256:${hash.digest("hex")}`;
  const start = await fetch(`${url}/v2/${repo}/blobs/uploads/`, { method: "POST" });
  await start.arrayBuffer();
  const put = new URL(start.headers.get("location")!, url);
  put.searchParams.set("digest", digest);
  const size = (await stat(path)).size;
  const body = Readable.toWeb(createReadStream(path, { highWaterMark: 8 << 20 })) as ReadableStream<Uint8Array>;
  const done = await fetch(put, { method: "PUT", headers: { "content-type": "application/octet-stream", "content-length": String(size) }, body, duplex: "half" } as RequestInit);
  if (done.status !== 201) throw new Error(`upload of ${path}: HTTP ${done.status} ${await done.text()}`);
  return { digest, size };
}

async function pushBytes(url: string, repo: string, bytes: Buffer): Promise<{ digest: string; size: number }> {
  const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
  const start = await fetch(`${url}/v2/${repo}/blobs/uploads/`, { method: "POST" });
  await start.arrayBuffer();
  const put = new URL(start.headers.get("location")!, url);
  put.searchParams.set("digest", digest);
  const done = await fetch(put, { method: "PUT", headers: { "content-type": "application/octet-stream" }, body: bytes });
  if (done.status !== 201) throw new Error(`upload: HTTP ${done.status}`);
  return { digest, size: bytes.length };
}

/** Bytes the files under `dir` take on disk (allocated blocks). */
function allocated(dir: string): number {
  return Number(execFileSync("du", ["-s", "-B1", dir], { encoding: "utf8" }).split("\t")[0]);
}

export async function pullToRows(ctx: PullBenchContext): Promise<void> {
  const mib = Number(process.env.BENCH_PULL_MIB ?? 2048);
  const blob = join(ctx.dir, `pull-vision-${mib}m.gguf`);
  if (!existsSync(blob)) await writeVisionBlob(blob, mib, false, "pull-bench");
  const views = await openViews(blob);
  const translated = (views.text?.size ?? 0) + (views.mmproj?.kind === "view" ? views.mmproj.view.size : 0);
  await views.close();
  const registry = await startOciRegistry();
  try {
    const repo = "library/bench";
    const model = await pushFile(registry.url, repo, blob);
    const config = await pushBytes(registry.url, repo, Buffer.from(JSON.stringify({ model_format: "gguf", file_type: "F16" })));
    const params = await pushBytes(registry.url, repo, Buffer.from(JSON.stringify({ num_ctx: 2048 })));
    const manifest = JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.docker.distribution.manifest.v2+json",
      config: { mediaType: "application/vnd.docker.container.image.v1+json", ...config },
      layers: [
        { mediaType: "application/vnd.ollama.image.model", ...model },
        { mediaType: "application/vnd.ollama.image.params", ...params },
      ],
    });
    const put = await fetch(`${registry.url}/v2/${repo}/manifests/1`, { method: "PUT", headers: { "content-type": "application/vnd.docker.distribution.manifest.v2+json" }, body: manifest });
    if (put.status !== 201) throw new Error(`manifest: HTTP ${put.status}`);

    const out = join(ctx.dir, "pull-to");
    const copy = join(ctx.dir, "pull-curl.gguf");
    const cli = join(ctx.root, "packages/cli/dist/bin.cjs");
    let ours: { maxRssKiB: number; outBlocks?: number } | undefined;
    let disk = 0;
    const fresh = () => {
      rmSync(out, { recursive: true, force: true });
      rmSync(copy, { force: true });
      mkdirSync(out, { recursive: true });
      execFileSync("sync"); // what the previous run left dirty is written back untimed
    };
    const [tOurs, tCurl, tCurlSync] = await ctx.race(
      [
        () => {
          ours = ctx.run(process.execPath, [cli, "pull", `${registry.host}/${repo}:1`, "--insecure", "--to", out, "-q"]);
          disk = allocated(out);
        },
        () => ctx.run("curl", ["-sSf", "-o", copy, `${registry.url}/v2/${repo}/blobs/${model.digest}`]),
        () => ctx.run("sh", ["-c", 'curl -sSf -o "$0" "$1" && sync "$0"', copy, `${registry.url}/v2/${repo}/blobs/${model.digest}`]),
      ],
      Math.max(3, Math.min(ctx.runs, 5)),
      fresh,
    );
    const gib = (model.size / 2 ** 30).toFixed(2);
    ctx.row({ scenario: `pull --to DIR of a ${gib} GiB Ollama gemma3 vision blob from a local registry (translated while downloading) vs \`curl\` of the blob`, ours: ctx.ms(tOurs!), baseline: ctx.ms(tCurl!), ratio: tOurs! / tCurl!, target: "≤ 1.15x", pass: tOurs! / tCurl! <= 1.15 });
    ctx.row({ scenario: "  the same pull vs `curl` + `sync` of the file (same durability: the pull fsyncs)", ours: ctx.ms(tOurs!), baseline: ctx.ms(tCurlSync!), ratio: tOurs! / tCurlSync!, target: "≤ 1.15x", pass: tOurs! / tCurlSync! <= 1.15 });
    const rss = ours!.maxRssKiB / 1024;
    ctx.row({ scenario: "  peak RSS of that pull", ours: `${rss.toFixed(0)} MiB`, baseline: "300 MiB", ratio: rss / 300, target: "< 300 MiB", pass: rss < 300 });
    // written: what the process wrote to the disk (its block outputs) or, where those are not counted, what its files take
    const written = Math.max(disk, (ours!.outBlocks ?? 0) * 512);
    ctx.row({ scenario: `  disk written by that pull vs the translated size (${(translated / 2 ** 20).toFixed(0)} MiB)`, ours: `${(written / 2 ** 20).toFixed(0)} MiB`, baseline: `${(translated / 2 ** 20).toFixed(0)} MiB`, ratio: written / translated, target: "≤ 1.02x", pass: written / translated <= 1.02 });
    rmSync(out, { recursive: true, force: true });
    rmSync(copy, { force: true });
  } finally {
    await registry.stop();
  }
}
