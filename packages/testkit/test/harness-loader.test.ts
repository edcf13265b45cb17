import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CPU_BASELINE, killAllSpawned, loadAndGenerate, loadedCpuBackend, pinNodeLlamaCppCpuVariant, runLoaderInSubprocess } from "@compat/testkit";
import { writeTinyLlama } from "./harness-tiny-llama";

let dir: string;
let valid: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "testkit-loader-"));
  valid = join(dir, "tiny-llama.gguf");
  await writeTinyLlama(valid);
});
afterAll(async () => {
  killAllSpawned();
  await rm(dir, { recursive: true, force: true });
});

describe("real llama.cpp loader (node-llama-cpp prebuilt)", () => {
  it("runs the CPU variant of the suite's baseline on every host, not the one ggml scores best here", async () => {
    const pinned = pinNodeLlamaCppCpuVariant();
    if (process.platform !== "linux" || process.arch !== "x64") return expect(pinned).toBeUndefined();
    expect(basename(pinned!)).toBe(`libggml-cpu-${CPU_BASELINE.nodeLlamaCppVariant}.so`);
    expect(await loadedCpuBackend()).toBe(pinned);
    // pinning again is a no-op: the folder is made once
    expect(pinNodeLlamaCppCpuVariant()).toBe(pinned);
  });

  it("loads a tiny llama GGUF in-process and greedily generates tokens", async () => {
    const first = await loadAndGenerate(valid, { maxTokens: 4 });
    expect(first).toMatchObject({ ok: true });
    if (!first.ok) return;
    expect(first.tokens).toHaveLength(4);
    // greedy sampling: the same file gives the same tokens
    const again = await loadAndGenerate(valid, { maxTokens: 4 });
    expect(again).toEqual(first);
  });

  it("embeds the prompt through the embedding context API", async () => {
    const result = await loadAndGenerate(valid, { embedding: true, prompt: "Hello world" });
    expect(result).toMatchObject({ ok: true, text: "" });
    if (!result.ok) return;
    expect(result.tokens.length).toBeGreaterThan(0);
    expect(result.embedding).toHaveLength(64); // the tiny model's n_embd
    expect(result.embedding?.every(Number.isFinite)).toBe(true);
  });

  it("returns llama.cpp's own error for an unknown architecture", async () => {
    const bad = join(dir, "unknown-arch.gguf");
    await writeTinyLlama(bad, { arch: "nosucharch" });
    const result = await loadAndGenerate(bad);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error).toContain("unknown model architecture: 'nosucharch'");
  });

  it("runs in a child process with the same result", async () => {
    const inProcess = await loadAndGenerate(valid, { maxTokens: 3 });
    const child = await runLoaderInSubprocess(valid, { maxTokens: 3 });
    expect(child).toEqual(inProcess);
  });

  it("maps a llama.cpp abort() in the child to ok:false with its stderr", async () => {
    const aborting = join(dir, "zero-kv-heads.gguf");
    await writeTinyLlama(aborting, { headCountKv: 0 });
    const result = await runLoaderInSubprocess(aborting);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.crash?.signal).toBe("SIGABRT");
    expect(result.error).toContain("GGML_ASSERT");
  });
});
