import { join } from "node:path";
import { GgmlType } from "@compat/gguf";
import { translate } from "@compat/handlers";
import { generateFixture, killAllSpawned, serverCompletion, startLlamaServer, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

/** The nemotron_h_moe proof's ignored keys (same text converter, same reasons), under the text arch. */
function ignoreKeys(arch: string): string[] {
  return [
    // n_ctx_train only sets the default context; llama.cpp's converter writes a 2^20 placeholder for rope-less hybrids
    `${arch}.context_length`,
    // Ollama wrote u32 arrays, llama.cpp's converter i32 arrays; the loader's array getter accepts both
    `${arch}.feed_forward_length`,
    `${arch}.attention.head_count_kv`,
    // without it llama.cpp counts tokenizer.ggml.tokens, the same number
    `${arch}.vocab_size`,
    // Nemotron-H attention has no RoPE: n_rot is read but never used
    `${arch}.rope.dimension_count`,
    // informational flag, not read for this arch
    `${arch}.rope.scaling.finetuned`,
    // reference gap, kept for equivalence: Ollama's generic "default" pre-tokenizer stays (native: pixtral)
    "tokenizer.ggml.pre",
  ];
}

// llama.cpp's converter RoPE-permutes attention Q/K rows (see the nemotron_h_moe proof): bytes differ, scores do not.
const EXPECTED = { ...NO_DIFFERENCES, data: ["blk.3.attn_k.weight", "blk.3.attn_q.weight"] };

describe("nemotron_h_omni handler (Nemotron-H with RADIO vision / Parakeet audio inline, as Ollama's converter wrote it)", () => {
  it.each([
    {
      variant: "omni",
      sourceDtype: "bf16",
      textArch: "nemotron_h_moe",
      markers: ["vision tensors v.*", "audio tensors a.*", "projector tensors mm.*"],
      extraIgnored: [],
    },
    {
      // quantized by Ollama; the twin is --outtype q8_0 (F16 where rows are not whole Q8_0 blocks, on both sides)
      variant: "omni-q8_0",
      sourceDtype: "bf16",
      textArch: "nemotron_h_moe",
      markers: ["vision tensors v.*", "audio tensors a.*", "projector tensors mm.*"],
      extraIgnored: [],
    },
    {
      variant: "vl",
      sourceDtype: "f16",
      textArch: "nemotron_h",
      markers: ["vision tensors v.*", "projector tensors mm.*"],
      // reference gap: NemotronHModel turns BOS on for the dense models, Ollama wrote add_bos_token = false
      // and the reference keeps it, so llama.cpp adds no BOS to prompts (native: nemotron_h_omni-add-bos)
      extraIgnored: ["tokenizer.ggml.add_bos_token"],
    },
  ] as const)(
    "$variant ($sourceDtype): loads as $textArch with the towers hidden; real llama.cpp runs it; matches the native twin",
    async ({ variant, sourceDtype, textArch, markers, extraIgnored }) => {
      const p = await proveHandler(await dir(), "nemotron_h_omni", {
        seed: 13,
        variant,
        sourceDtype,
        nativeTwin: true,
        profile: "reference",
        twin: { ignoreKeys: [...ignoreKeys(textArch), ...extraIgnored] },
      });
      // no latent or MTP tensors, so the nemotron_h_moe handler that follows finds nothing to do
      expect(p.view.report.handlers).toEqual([{ name: "nemotron_h_omni", markers }]);
      const m = p.translatedModel;
      expect(m.getString("general.architecture")).toBe(textArch);
      expect(m.keys().filter((k) => k.startsWith(`${textArch}.vision.`) || k.startsWith(`${textArch}.audio.`))).toEqual([]);
      expect(m.getU32(`${textArch}.ssm.inner_size`)).toBe(64);
      expect(m.tensors.some((t) => /^(a|v|mm)\./.test(t.name))).toBe(false);
      if (variant === "omni-q8_0") expect(m.findTensor("blk.0.ssm_in.weight")?.type).toBe(GgmlType.Q8_0);
      expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
      expect(p.native.meta.reorderedTensors).toEqual(EXPECTED.data);
      expect(p.diff).toEqual(EXPECTED);
      expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
      // The native twin loads, is left alone, and generates the same greedy tokens from the same prompt tokens.
      const nativeLoad = p.twin!.load!;
      expect(nativeLoad.ok ? nativeLoad.tokens : nativeLoad.error).toEqual(p.load.ok ? p.load.tokens : []);
    },
  );
});

describe("nemotron_h_omni in llama-server (upstream llama.cpp from LLAMA_BIN)", () => {
  afterAll(() => killAllSpawned());

  async function promptTokens(model: string): Promise<number[]> {
    const server = await startLlamaServer({ model });
    try {
      const res = await fetch(`${server.url}/tokenize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ content: "Hello", add_special: true }),
      });
      expect(res.status).toBe(200);
      const tokens = ((await res.json()) as { tokens: number[] }).tokens;
      // and it serves a completion
      expect((await serverCompletion(server, { prompt: "Hello" })).tokens).toHaveLength(4);
      return tokens;
    } finally {
      await server.stop();
    }
  }

  async function translated(profile: "native" | "reference"): Promise<string> {
    const d = await dir();
    const ollama = await writeFixture(generateFixture("nemotron_h_omni", { seed: 13, variant: "vl", layout: "ollama" }), d);
    const view = await translate(ollama.text, { profile });
    const path = join(d, `nemotron_h_omni-vl-server-${profile}.gguf`);
    await view!.writeTo(path);
    expect(view!.report[profile === "native" ? "fixes" : "gapsKept"].map((f) => f.name)).toEqual(["nemotron_h_omni-add-bos"]);
    await view!.close();
    return path;
  }

  it("vl: the native twin's prompts start with BOS; the reference output's do not, the native output's do (nemotron_h_omni-add-bos)", async () => {
    const native = await writeFixture(generateFixture("nemotron_h_omni", { seed: 13, variant: "vl", layout: "native" }), await dir());
    const bos = 1; // <s>
    const nativeTokens = await promptTokens(native.text);
    expect(nativeTokens[0]).toBe(bos);
    const referenceTokens = await promptTokens(await translated("reference"));
    expect(referenceTokens[0]).not.toBe(bos);
    expect(referenceTokens).toEqual(nativeTokens.slice(1));
    expect(await promptTokens(await translated("native"))).toEqual(nativeTokens);
  });

  it("vl, native profile: exactly the native twin's keys but the pre-tokenizer; same greedy tokens in real llama.cpp", async () => {
    const p = await proveHandler(join(await dir(), "native-profile"), "nemotron_h_omni", {
      seed: 13,
      variant: "vl",
      sourceDtype: "f16",
      nativeTwin: true,
      twin: { ignoreKeys: ignoreKeys("nemotron_h") },
    });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["nemotron_h_omni", "nemotron_h_omni-add-bos"]]);
    expect(p.translatedModel.getBool("tokenizer.ggml.add_bos_token")).toBe(true);
    expect(p.diff).toEqual(EXPECTED);
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens : nativeLoad.error).toEqual(p.load.ok ? p.load.tokens : []);
  });
});
