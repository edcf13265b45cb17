import { afterAll, describe, expect, it } from "vitest";
import { killAllSpawned } from "@compat/testkit";
import { tempDir } from "../helpers";
import { join } from "node:path";
import { NO_DIFFERENCES, proveHandler } from "../proof";
import { expectedDiff, expectMtpDrafts, expectMtpOpsElementwise, MTP_BLOCK, MTP_LAYER_NORMS, expectDraftsAgree, mtpDraftCandidates, twinOptions } from "./qwen35-family";

const dir = tempDir();
afterAll(() => killAllSpawned());
const SEED = 35;
/** The reference output of 9b (f16), for the native profile's comparison. */
let referenceOut: string | undefined;

describe("qwen35 handler (Qwen 3.5 dense as Ollama's legacy converter wrote it)", () => {
  it.each([
    { variant: "9b", sourceDtype: "f16" as const, mtp: true, markers: ["kv qwen35.vision.block_count", "kv qwen35.image_token_id", "kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved", "embedded MTP tensors mtp.*", "embedded vision tensors v.*"] },
    { variant: "9b-q8_0", sourceDtype: "f16" as const, mtp: true, markers: ["kv qwen35.vision.block_count", "kv qwen35.image_token_id", "kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved", "embedded MTP tensors mtp.*", "embedded vision tensors v.*"] },
    { variant: "9b", sourceDtype: "bf16" as const, mtp: true, markers: ["kv qwen35.vision.block_count", "kv qwen35.image_token_id", "kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved", "embedded MTP tensors mtp.*", "embedded vision tensors v.*"] },
    { variant: "9b-text", sourceDtype: "f16" as const, mtp: false, markers: ["kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved"] },
  ])("$variant ($sourceDtype): fixes hparams, renames ssm_dt, moves the MTP head to block 2 with its norms +1, hides v.*; real llama.cpp loads it; matches the native twin", async ({ variant, sourceDtype, mtp, markers }) => {
    const p = await proveHandler(await dir(), "qwen35", { seed: SEED, variant, sourceDtype, twin: twinOptions(false, mtp), nativeTwin: { load: variant !== "9b-q8_0" && sourceDtype === "f16" }, profile: "reference" });
    expect(p.view.report.handlers).toEqual([{ name: "qwen35", markers }]);
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(mtp ? ["qwen35-mtp-norms-once"] : []);
    if (variant === "9b" && sourceDtype === "f16") referenceOut = p.outPath;
    const m = p.translatedModel;
    expect(m.tensors.some((t) => /^(v|mm|mtp)\./.test(t.name))).toBe(false);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect({ ...p.diff, data: [...p.diff.data].sort() }).toEqual(expectedDiff(mtp));
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    if (p.twin?.load) {
      expect(p.twin.load.ok ? p.twin.load.tokens.length : p.twin.load.error).toBeGreaterThan(0);
      // the trunk is the native one, so greedy decoding agrees token for token
      if (p.load.ok && p.twin.load.ok) expect(p.load.tokens).toEqual(p.twin.load.tokens);
    }
    // the native twin's MTP head drafts the same way
    if (p.twin?.load && mtp) await expectMtpDrafts(p.twin.paths.text);
    if (mtp) {
      expect(p.view.report.ops.map((o) => `${o.tensor} <- ${o.label}`).sort()).toEqual(
        ["attn_k_norm", "attn_norm", "attn_q_norm", "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm", "post_attention_norm"]
          .map((n) => `blk.${MTP_BLOCK}.${n}.weight <- F32 norm +1`)
          .sort(),
      );
      await expectMtpOpsElementwise(p, "qwen35", { variant, seed: SEED, sourceDtype }, false);
      await expectMtpDrafts(p.outPath);
    } else {
      expect(p.view.report.ops).toEqual([]);
    }
  });

  it("native profile (qwen35-mtp-norms-once): the MTP layer norms equal the twin's; llama-server's MTP head drafts the twin's tokens, the reference output's MTP head drafts others", async () => {
    const p = await proveHandler(join(await dir(), "native-profile"), "qwen35", { seed: SEED, variant: "9b", twin: twinOptions(false, true), nativeTwin: { load: true } });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["qwen35", "qwen35-mtp-norms-once"]]);
    // the four layer norms are now native: nothing differs from the twin (the head norms still get their +1)
    expect(p.diff).toEqual(NO_DIFFERENCES);
    for (const n of MTP_LAYER_NORMS) expect(p.translatedModel.findTensor(n)?.type, n).toBe(0);
    expect(p.view.report.ops.map((o) => o.label).filter((l) => l === "F32 norm +1")).toHaveLength(3);
    if (p.load.ok && p.twin!.load!.ok) expect(p.load.tokens).toEqual(p.twin!.load!.tokens);
    const twin = await mtpDraftCandidates(p.twin!.paths.text);
    expect(twin.length).toBeGreaterThan(0);
    expectDraftsAgree(await mtpDraftCandidates(p.outPath), twin);
    if (referenceOut === undefined) throw new Error("run with the reference 9b (f16) test");
    expectDraftsAgree(await mtpDraftCandidates(referenceOut), twin, false);
  });
});
