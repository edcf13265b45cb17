import { afterAll, describe, expect, it } from "vitest";
import { readGguf, writeGguf } from "@compat/gguf";
import { killAllSpawned, runLoaderInSubprocess } from "@compat/testkit";
import { tempDir } from "../helpers";
import { proveHandler } from "../proof";
import { expectedDiff, expectMtpDrafts, expectMtpOpsElementwise, MTP_BLOCK, twinOptions } from "./qwen35-family";

const dir = tempDir();
afterAll(() => killAllSpawned());
const SEED = 36;

const FULL_MARKERS = [
  "kv qwen35moe.vision.block_count",
  "kv qwen35moe.image_token_id",
  "kv qwen35moe.ssm.v_head_reordered",
  "kv qwen35moe.feed_forward_length",
  "kv qwen35moe.rope.mrope_interleaved",
  "embedded MTP tensors mtp.*",
  "embedded vision tensors v.*",
];

const NORM_SHIFTS = ["attn_k_norm", "attn_norm", "attn_q_norm", "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm", "post_attention_norm"].map(
  (n) => `blk.${MTP_BLOCK}.${n}.weight <- F32 norm +1`,
);
const stacks = (label: string) => ["down", "gate", "up"].map((p) => `blk.${MTP_BLOCK}.ffn_${p}_exps.weight <- ${label}`);

describe("qwen35moe handler (Qwen 3.5 MoE as Ollama's legacy converter wrote it)", () => {
  it.each([
    { variant: "35b-a3b", mtp: true, markers: FULL_MARKERS, ops: [...NORM_SHIFTS, ...stacks("stack experts")] },
    { variant: "35b-a3b-q8_0", mtp: true, markers: FULL_MARKERS, ops: [...NORM_SHIFTS, ...stacks("stack experts")] },
    {
      variant: "35b-a3b-text",
      mtp: false,
      markers: ["kv qwen35moe.ssm.v_head_reordered", "kv qwen35moe.feed_forward_length", "kv qwen35moe.rope.mrope_interleaved"],
      ops: [],
    },
    {
      // the reference refuses to stack experts of mixed types (then llama.cpp misses the MTP block's
      // ffn_gate_exps); we promote that stack to F32, which keeps every value
      variant: "35b-a3b-mixed",
      mtp: true,
      markers: ["kv qwen35moe.ssm.v_head_reordered", "kv qwen35moe.feed_forward_length", "kv qwen35moe.rope.mrope_interleaved", "embedded MTP tensors mtp.*"],
      ops: [...NORM_SHIFTS, `blk.${MTP_BLOCK}.ffn_down_exps.weight <- stack experts`, `blk.${MTP_BLOCK}.ffn_gate_exps.weight <- stack experts (promoted to F32)`, `blk.${MTP_BLOCK}.ffn_up_exps.weight <- stack experts`],
      layout: [`blk.${MTP_BLOCK}.ffn_gate_exps.weight`],
    },
  ])("$variant: fixes hparams, renames ssm_dt, moves the MTP head to block 2 (norms +1, experts stacked), hides v.*; real llama.cpp loads it; matches the native twin", async ({ variant, mtp, markers, ops, layout }) => {
    const nativeTwin = { load: variant === "35b-a3b" || variant === "35b-a3b-text" };
    const p = await proveHandler(await dir(), "qwen35moe", { seed: SEED, variant, twin: twinOptions(true, mtp, layout), nativeTwin });
    expect(p.view.report.handlers).toEqual([{ name: "qwen35moe", markers }]);
    const m = p.translatedModel;
    expect(m.tensors.some((t) => /^(v|mm|mtp)\./.test(t.name))).toBe(false);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect({ ...p.diff, data: [...p.diff.data].sort() }).toEqual(expectedDiff(mtp));
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    if (p.twin?.load) expect(p.twin.load.ok ? p.twin.load.tokens.length : p.twin.load.error).toBeGreaterThan(0);
    // the native twin's MTP head drafts the same way
    if (p.twin?.load && mtp) await expectMtpDrafts(p.twin.paths.text);
    expect(p.view.report.ops.map((o) => `${o.tensor} <- ${o.label}`).sort()).toEqual([...ops].sort());
    if (mtp) await expectMtpOpsElementwise(p, "qwen35moe", variant, SEED, true);
    if (mtp) await expectMtpDrafts(p.outPath);
    if (variant === "35b-a3b-mixed") await expectRejectedWithoutStack(p.outPath);
  });
});

/**
 * Why the mixed-type stack is promoted rather than skipped as the reference does: without
 * it the MTP block lacks ffn_gate_exps, and llama.cpp refuses the file even when it does not
 * load the MTP head (a skipped tensor must still exist).
 */
async function expectRejectedWithoutStack(outPath: string): Promise<void> {
  const name = `blk.${MTP_BLOCK}.ffn_gate_exps.weight`;
  const m = await readGguf(outPath);
  const without = outPath.replace(/\.gguf$/, "-without-gate-stack.gguf");
  try {
    m.dropTensor(name);
    await writeGguf(m, without);
  } finally {
    await m.close();
  }
  const load = await runLoaderInSubprocess(without, { maxTokens: 1 });
  expect(load.ok ? "loaded" : load.error).toContain(`missing tensor '${name}'`);
}
