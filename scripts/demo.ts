/**
 * The main job, end to end, on a machine with no Ollama models: generate an
 * Ollama-format GGUF shaped like a published blob, show that stock llama-server
 * rejects it, translate it with the `ollama-compat` command, and serve the result
 * with the real llama-server. Prints what happened at each step.
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateFixture, runLoaderInSubprocess, serverCompletion, startLlamaServer, writeFixture } from "@compat/testkit";

const arch = process.argv[2] ?? "qwen3next";
const dir = await mkdtemp(join(tmpdir(), "ollama-compat-demo-"));
try {
  const src = (await writeFixture(generateFixture(arch, { seed: 1, layout: "ollama" }), dir)).text;
  console.log(`1. Ollama-format ${arch} GGUF: ${src}`);

  const before = await runLoaderInSubprocess(src);
  console.log(`2. stock llama.cpp on it: ${before.ok ? "loads" : `rejected: ${before.error.split("\n")[0]}`}`);

  const out = join(dir, `${arch}-translated.gguf`);
  const cli = join(import.meta.dirname, "..", "packages", "cli", "dist", "bin.js");
  console.log(`3. ${execFileSync(process.execPath, [cli, "translate", src, "-o", out], { encoding: "utf8" }).trim()}`);

  const server = await startLlamaServer({ model: out });
  try {
    const done = await serverCompletion(server, { prompt: "Hello", nPredict: 8 });
    console.log(`4. llama-server ${server.url} served it: ${done.tokens.length} tokens ${JSON.stringify(done.tokens)}`);
  } finally {
    await server.stop();
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
