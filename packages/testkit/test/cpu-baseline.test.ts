import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PRINTABLE_ASCII_GRAMMAR, runLlamaQuantize, startLlamaServer } from "@compat/testkit";
import { writeTinyLlama } from "./harness-tiny-llama";

/** qemu-user, which scripts/system-deps.sh installs for the prebuild tests. */
const qemu = (() => {
  try {
    execFileSync("qemu-x86_64", ["-version"], { stdio: "ignore" });
    return process.platform === "linux" && process.arch === "x64";
  } catch {
    return false;
  }
})();

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "testkit-cpu-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Each step's log-probabilities of its top 3 next tokens, greedy from one prompt. */
async function scores(model: string, launcher?: string[]): Promise<Array<Array<[number, number]>>> {
  // qemu's TCG runs llama-server one to two orders of magnitude slower than the host
  const server = await startLlamaServer({ model, launcher, startTimeoutMs: 600_000 });
  try {
    const r = await fetch(`${server.url}/completion`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      // printable ASCII only: llama-server reports probabilities per whole UTF-8 piece, and a
      // random model's stray bytes would merge steps
      body: JSON.stringify({ prompt: "Hello world", n_predict: 4, temperature: 0, n_probs: 3, cache_prompt: false, ignore_eos: true, grammar: PRINTABLE_ASCII_GRAMMAR }),
      signal: AbortSignal.timeout(600_000),
    });
    const body = (await r.json()) as { completion_probabilities: Array<{ top_logprobs: Array<{ id: number; logprob: number }> }> };
    return body.completion_probabilities.map((p) => p.top_logprobs.map((t) => [t.id, t.logprob]));
  } finally {
    await server.stop();
  }
}

describe("one CPU baseline for every host (scripts/build-llama-tools.sh)", () => {
  // The llama.cpp tools are built for x86-64-v3, so an AMD host without AVX-512 runs the very
  // kernels this host runs, whatever this host has (AVX-512, AMX): the same answer to the bit.
  // qemu's TCG emulates an AMD EPYC (Rome: AVX2, no AVX-512) on any x86-64 host.
  it.skipIf(!qemu)("llama-server answers a Q8_0 model with the same log-probabilities here and on an emulated AMD EPYC without AVX-512", { timeout: 900_000 }, async () => {
    const f32 = join(dir, "tiny.gguf");
    const q8 = join(dir, "tiny-q8_0.gguf");
    await writeTinyLlama(f32);
    expect((await runLlamaQuantize(f32, q8, "Q8_0")).ok).toBe(true);
    const here = await scores(q8);
    expect(here).toHaveLength(4);
    expect(await scores(q8, ["qemu-x86_64", "-cpu", "EPYC-Rome-v1"])).toEqual(here);
  });
});
