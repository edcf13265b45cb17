import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

const IGNORE_KEYS = [
  // n_ctx_train only sets the default context; llama.cpp's converter writes a 2^20 placeholder for rope-less hybrids
  "nemotron_h_moe.context_length",
  // Ollama wrote u32 arrays, llama.cpp's converter i32 arrays; the loader's array getter accepts both
  "nemotron_h_moe.feed_forward_length",
  "nemotron_h_moe.attention.head_count_kv",
  // without it llama.cpp counts tokenizer.ggml.tokens, the same number
  "nemotron_h_moe.vocab_size",
  // Nemotron-H attention has no RoPE: n_rot is read but never used
  "nemotron_h_moe.rope.dimension_count",
  // informational flag, not read for this arch
  "nemotron_h_moe.rope.scaling.finetuned",
  // reference gap, kept by both profiles: Ollama's generic "default" pre-tokenizer (and its add_bos_token=false)
  // stay; the native "pixtral" pre-tokenizer also turns BOS on, so prompts tokenize differently. Not fixed by the
  // native profile: whether that add_bos_token=false is Ollama's default or NVIDIA's is not established (findings.md)
  "tokenizer.ggml.pre",
];

// llama.cpp's converter applies the Llama RoPE row permutation to attention Q/K (GraniteHybridModel ->
// LlamaModel.modify_tensors). These layers have no RoPE, and the same per-head permutation of Q and K
// leaves every attention score unchanged, so only the bytes differ.
const EXPECTED = { ...NO_DIFFERENCES, data: ["blk.3.attn_k.weight", "blk.3.attn_q.weight"] };

describe("nemotron_h_moe handler (Nemotron-H MoE as Ollama's legacy converter wrote it)", () => {
  it.each([
    { variant: "latent", markers: ["tensor blk.N.ffn_latent_in"], latent: 16 },
    { variant: "mtp", markers: ["embedded MTP tensors mtp.*"], latent: undefined },
    { variant: "super", markers: ["tensor blk.N.ffn_latent_in", "embedded MTP tensors mtp.*"], latent: 16 },
  ])("$variant: renames latent tensors, hides mtp.*; real llama.cpp loads it; matches the native twin", async ({ variant, markers, latent }) => {
    // The native twin (convert_hf_to_gguf.py --no-mtp) is left alone; super's is latent's again, so it is not rerun.
    const nativeTwin = { load: variant !== "super" };
    const p = await proveHandler(await dir(), "nemotron_h_moe", { seed: 9, variant, sourceDtype: "bf16", nativeTwin, twin: { ignoreKeys: IGNORE_KEYS } });
    expect(p.view.report.handlers).toEqual([{ name: "nemotron_h_moe", markers }]);
    expect(p.view.report.fixes).toEqual([]);
    const m = p.translatedModel;
    expect(m.has("nemotron_h_moe.moe_latent_size") ? m.getU32("nemotron_h_moe.moe_latent_size") : undefined).toBe(latent);
    expect(m.tensors.some((t) => t.name.startsWith("mtp.") || t.name.includes("ffn_latent_in") || t.name.includes("ffn_latent_out"))).toBe(false);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect(p.native.meta.reorderedTensors).toEqual(EXPECTED.data);
    expect(p.diff).toEqual(EXPECTED);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    if (nativeTwin.load) {
      const nativeLoad = p.twin!.load!;
      expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBeGreaterThan(0);
    }
  });
});
