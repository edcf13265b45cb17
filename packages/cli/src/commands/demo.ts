import { mkdir, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BridgeError, findLlamaTool, launch, type RunningServer } from "@compat/server-bridge";
import { humanBytes } from "../format";
import { ExitCode, paint, type CliIo } from "../io";
import { imageAnswer, llamaErrorText, startFailureText, textAnswer } from "../llama-check";
import { detectCommand } from "./detect";
import { defaultMmprojPath, translateCommand } from "./translate";

/**
 * `demo`: the main job on a machine with no Ollama models and no network: a tiny
 * Ollama-format vision model (gemma3 with its vision tower in the same file, as Ollama
 * publishes it), `detect`, `translate` (text GGUF + mmproj), then the real llama-server
 * on the result for one text and one image answer.
 */
export async function demoCommand(opts: { llamaServer?: string; keep?: string }, io: CliIo, passthrough: string[] = []): Promise<number> {
  // no llama-server, no demo: say so before building anything
  findLlamaTool("llama-server", { explicit: opts.llamaServer, env: io.env });
  const c = paint(io, "out");
  const title = (n: number, s: string) => io.out(`\n${c(1, `${n}. ${s}`)}\n`);
  const dir = opts.keep ?? (await mkdtemp(join(tmpdir(), "ollama-compat-demo-")));
  if (opts.keep) await mkdir(dir, { recursive: true });
  let server: RunningServer | undefined;
  try {
    const src = join(dir, "gemma3-4b-vision-ollama.gguf");
    title(1, "A tiny Ollama-format vision model (gemma3, vision tower embedded, random weights)");
    const { writeDemoModel } = await import("../demo-fixture");
    await writeDemoModel(src);
    io.out(`wrote ${src} (${humanBytes((await stat(src)).size)})\n`);

    title(2, "ollama-compat detect");
    await detectCommand(src, {}, io);

    title(3, "Stock llama.cpp on the Ollama file as it is");
    const refused = await tryLoad(["--model", src, ...SMALL, ...passthrough], io, opts.llamaServer);
    io.out(refused === null ? "llama-server loaded it (unexpected for this file)\n" : `llama-server refused it: ${refused}\n`);

    title(4, "ollama-compat translate");
    const out = join(dir, "gemma3-4b-vision.gguf");
    const mmproj = defaultMmprojPath(out);
    await translateCommand(src, { output: out, mmproj }, io);

    title(5, "llama-server (stock llama.cpp) serves the translation");
    try {
      server = await launch(["--model", out, "--mmproj", mmproj, ...SMALL], {
        env: io.env,
        llamaServer: opts.llamaServer,
        startTimeoutMs: 300_000,
        args: passthrough,
      });
    } catch (e) {
      io.err(`ollama-compat: demo: llama-server did not start: ${startFailureText(e, "ollama-compat demo")}\n`);
      return ExitCode.error;
    }
    io.out(`$ llama-server --model ${out} --mmproj ${mmproj}  ->  ${server.url}\n`);
    const text = await textAnswer(server.url, "Hello", 8);
    io.out(`text:  "Hello" -> ${JSON.stringify(text.text)} (${text.completionTokens} tokens)\n`);
    const without = await textAnswer(server.url, "What is in this image?", 1);
    const image = await imageAnswer(server.url, "What is in this image?", 8);
    const imageTokens = image.promptTokens - without.promptTokens;
    io.out(`image: a 16x16 grey picture -> ${JSON.stringify(image.text)} (${imageTokens} image tokens in the prompt)\n`);
    if (text.completionTokens === 0 || imageTokens <= 0) {
      io.err(`ollama-compat: demo: llama-server answered but ${text.completionTokens === 0 ? "generated no tokens" : "did not encode the image"}\n`);
      return ExitCode.error;
    }
    io.out(`\n${c(32, "demo: ok")}: the weights are random, so the words are too; what matters is that stock llama.cpp loaded both files and answered.\n`);
    if (opts.keep) io.out(`files kept in ${dir}\n`);
    return ExitCode.ok;
  } finally {
    await server?.stop();
    if (!opts.keep) await rm(dir, { recursive: true, force: true });
  }
}

const SMALL = ["--ctx-size", "1024", "--parallel", "1", "--threads", "2", "--no-warmup"];

/**
 * Starts llama-server on `args` and stops it again: null when it came up, else llama.cpp's
 * error line. llama.cpp logs from a worker thread that is not flushed at exit, so a fast
 * failure can print nothing; one more try usually gets the reason, and if not, the exit
 * itself is the verdict.
 */
async function tryLoad(args: string[], io: CliIo, llamaServer: string | undefined): Promise<string | null> {
  let exit = "";
  for (let attempt = 1; attempt <= 2; attempt++) {
    try {
      const server = await launch(args, { env: io.env, llamaServer, startTimeoutMs: 300_000 });
      await server.stop();
      return null;
    } catch (e) {
      // a crash on the Ollama file is llama.cpp's verdict on it too
      if (e instanceof BridgeError && e.code === "SERVER_CRASHED") return startFailureText(e, "ollama-compat demo");
      // a failed spawn, a busy port…: the caller's error, not llama.cpp's verdict on the file
      if (!(e instanceof BridgeError) || e.code !== "SERVER_START_FAILED" || (e.details.exitCode === null && e.details.signal === null)) throw e;
      const lines = (e.details.lastLines as string[] | undefined) ?? [];
      if (lines.length > 0) return llamaErrorText(lines);
      exit = String(e.details.exitCode ?? e.details.signal);
    }
  }
  return `exited with code ${exit} before it was ready (its log was lost at exit)`;
}
