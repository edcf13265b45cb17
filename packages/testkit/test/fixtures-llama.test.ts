/**
 * Real-llama.cpp proof for the fixtures: every native fixture loads and
 * generates in the llama.cpp bundled with node-llama-cpp, and each Ollama
 * fixture does what its meta says (the gemma3 vision and qwen3next ones are
 * rejected, with llama.cpp's own error text recorded here).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allFixtureVariants, generateFixture, runLoaderInSubprocess, writeFixture, type FixtureLayout } from "@compat/testkit";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "fixtures-llama-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function load(arch: string, variant: string, layout: FixtureLayout) {
  const fixture = generateFixture(arch, { seed: 1, layout, variant });
  const paths = await writeFixture(fixture, dir);
  return { meta: fixture.meta, result: await runLoaderInSubprocess(paths.text, { maxTokens: 4 }) };
}

describe("fixtures in real llama.cpp", () => {
  it.each(allFixtureVariants())("native $arch/$variant loads and generates", async ({ arch, variant }) => {
    const { result } = await load(arch, variant, "native");
    expect(result, result.ok ? "" : result.error).toMatchObject({ ok: true });
    if (result.ok) expect(result.tokens).toHaveLength(4);
  }, 120_000);

  it.each(allFixtureVariants())("ollama $arch/$variant does what its meta says", async ({ arch, variant }) => {
    const { meta, result } = await load(arch, variant, "ollama");
    const expected = meta.expect.text;
    if (expected.outcome === "loads") {
      expect(result, result.ok ? "" : result.error).toMatchObject({ ok: true });
    } else {
      expect(result).toMatchObject({ ok: false });
      if (!result.ok) expect(result.error).toContain(expected.errorIncludes);
    }
  }, 120_000);

  it("rejects the Ollama gemma3 4B-with-vision file: its missing rms epsilon stops the hparams", async () => {
    const { result } = await load("gemma3", "4b-vision", "ollama");
    expect(result).toMatchObject({ ok: false });
    if (!result.ok) {
      expect(result.error).toMatch(
        /error loading model hyperparameters: key not found in model: gemma3\.attention\.layer_norm_rms_epsilon/,
      );
    }
  }, 120_000);

  it("rejects the Ollama qwen3next file: llama.cpp wants blk.N.ssm_dt.bias", async () => {
    const { result } = await load("qwen3next", "80b-a3b", "ollama");
    expect(result).toMatchObject({ ok: false });
    if (!result.ok) expect(result.error).toMatch(/missing tensor 'blk\.0\.ssm_dt\.bias'/);
  }, 120_000);

  it("the two layouts of llama3 carry the same weights: same greedy tokens", async () => {
    const a = await load("llama", "llama3", "native");
    const b = await load("llama", "llama3", "ollama");
    expect(a.result.ok && b.result.ok).toBe(true);
    if (a.result.ok && b.result.ok) expect(b.result.tokens).toEqual(a.result.tokens);
  }, 120_000);
});
