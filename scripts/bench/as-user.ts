// The rows of `npm run bench` that time a command the way a user runs it (issue 40): whole
// processes timed from outside, each run as a user would start it (a new output file, a store
// not seen before by the process), against what the command stands on.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { freePort } from "@compat/server-bridge";
import { buildOllamaStore } from "@compat/store";
import { findLlamaTools } from "@compat/testkit";
import { writeVisionBlob } from "./files";
import { mount, untilHealthy } from "./mount";
import type { MountBenchContext as BenchContext } from "./mount";

/** Runs a command to its end; throws with its last output when it fails. */
function runToEnd(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "ignore", "pipe"] });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${r.stderr.slice(-2000)}`);
}

/**
 * `translate` of a 1 GiB Ollama blob as a user runs it: a whole process, a new output file
 * every run (no earlier output's pages or blocks to reuse), against `cp` + `sync` of the blob to
 * a new file (the same durability: translate fsyncs before its rename). Pairs alternate; what a
 * run left dirty is synced (untimed) before the next, and its output removed.
 */
export async function translateAsUser(ctx: BenchContext): Promise<void> {
  const { dir, cli, race, row, ms } = ctx;
  const blob = join(dir, "gemma3-1g.gguf");
  if (!existsSync(blob)) await writeVisionBlob(blob, 1024, false);
  const out = join(dir, "as-user");
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  let n = 0;
  const fresh = () => {
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    execFileSync("sync");
    n++;
  };
  const [tOurs, tCp] = await race(
    [
      () => runToEnd(process.execPath, [cli, "translate", blob, "-o", join(out, `t${n}.gguf`), "--mmproj", join(out, `m${n}.gguf`), "--quiet"]),
      () => runToEnd("sh", ["-c", 'cp "$0" "$1" && sync "$1"', blob, join(out, `c${n}.gguf`)]),
    ],
    Math.max(5, ctx.runs),
    fresh,
  );
  rmSync(out, { recursive: true, force: true });
  row({
    scenario: `\`ollama-compat translate\` of a ${(statSync(blob).size / 2 ** 30).toFixed(1)} GiB Ollama gemma3 vision blob as a user runs it (whole process, a new output each run) vs \`cp\` + \`sync\` to a new file`,
    ours: ms(tOurs!),
    baseline: ms(tCp!),
    ratio: tOurs! / tCp!,
    target: "≤ 1.25x",
    pass: tOurs! / tCp! <= 1.25,
  });
}

/**
 * `serve --all` over ten models, started as a user starts it (a process of its own; the sidecar
 * cache kept from an earlier start), until Ollama's API answers and until its router is ready,
 * against what it stands on: `node -e 0` plus llama-server's own router started over the same ten
 * models as llama.cpp loads them (a text file and a projector each, from a mount of the store:
 * the files serve --all hands its router, without a copy), until /health answers.
 */
export async function serveReady(ctx: BenchContext): Promise<void> {
  const { dir, cli, race, row, ms } = ctx;
  const work = join(dir, "serve-ready");
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const { server } = await findLlamaTools();
  const specs = [];
  for (let i = 0; i < 10; i++) {
    // sparse blobs of the bench's size, each its own digest; a router only looks at their headers at start
    const p = join(work, `vision-${i}.gguf`);
    await writeVisionBlob(p, ctx.blobMiB, true, `bench model ${i}`);
    specs.push({ name: `vision${i}:4b`, model: p });
  }
  const store = join(work, "store");
  await buildOllamaStore(store, specs);
  const mounted = join(work, "mounted");
  const unmount = mount(cli, mounted, store, join(work, "cache-mounted"));
  // one cache folder for every run, as a user's restarts share theirs: the warm-up run writes
  // the projectors' sidecars that the router's first look at each mmproj asks for
  // until the URL on stdout answers (Ollama's API, as Ollama's own server is ready), or until
  // stderr says the router behind it is ready too (every route answers)
  // (each start is timed to that point: its stop, after, is not part of it)
  const serveAll = (until: "url" | "router") => async () => {
    const env = { ...process.env, OLLAMA_HOST: `127.0.0.1:${await freePort()}` };
    const t0 = performance.now();
    const child = spawn(process.execPath, [cli, "serve", "--all", "--models", store, "--cache-dir", join(work, "cache"), "--llama-server", server], { stdio: ["ignore", "pipe", "pipe"], env });
    if (until === "url") {
      child.stderr!.resume();
      await untilHealthy(child, (log) => /^(http:\/\/[\d.]+:\d+)$/m.exec(log)?.[1], "stdout", "/api/version");
    } else {
      child.stdout!.resume();
      await untilHealthy(child, (log) => /Ollama API ready on (http:\/\/[\d.]+:\d+)/.exec(log)?.[1], "stderr", "/api/version");
    }
    const ready = performance.now() - t0;
    child.kill("SIGTERM");
    await new Promise((r) => child.once("close", r));
    return { ownMs: ready };
  };
  const nodeStart = () => runToEnd(process.execPath, ["-e", "0"]);
  const router = async () => {
    const t0 = performance.now();
    const child = spawn(server, ["--models-dir", mounted, "--host", "127.0.0.1", "--port", "0", "--no-webui", "--offline"], { stdio: ["ignore", "ignore", "pipe"] });
    await untilHealthy(child, (log) => /listening on (http:\/\/[\d.]+:\d+)/.exec(log)?.[1]);
    const ready = performance.now() - t0;
    child.kill("SIGTERM");
    await new Promise((r) => child.once("close", r));
    return { ownMs: ready };
  };
  let times: number[];
  try {
    times = await race([serveAll("url"), serveAll("router"), nodeStart, router]);
  } finally {
    unmount();
  }
  const [tUrl, tReady, tNode, tRouter] = times;
  const floor = tNode! + tRouter!;
  const what = `\`serve --all\` over 10 Ollama gemma3 vision models of ${(ctx.blobMiB / 1024).toFixed(0)} GiB (a process of its own, sidecars kept from an earlier start)`;
  const against = `\`node -e 0\` (${ms(tNode!)}) + llama-server --models-dir over the same 10, mounted (text + projector each; ${ms(tRouter!)}) until /health`;
  for (const [until, t] of [
    ["its URL answers /api/version", tUrl!],
    ["it says its router is ready (every route answers)", tReady!],
  ] as const) {
    row({ scenario: `${what} until ${until} vs ${against}`, ours: ms(t), baseline: ms(floor), ratio: t / floor, target: "≤ 1.5x", pass: t / floor <= 1.5 });
  }
  rmSync(work, { recursive: true, force: true });
}
