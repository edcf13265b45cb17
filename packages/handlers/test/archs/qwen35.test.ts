import { afterAll, describe, expect, it } from "vitest";
import { killAllSpawned } from "@compat/testkit";
import { tempDir } from "../helpers";
import { proveHandler } from "../proof";
import { expectMtpDrafts, expectMtpOpsElementwise, expectQwen35Translation, MTP_NORM_SHIFTS, twinOptions } from "./qwen35-family";

const dir = tempDir();
afterAll(() => killAllSpawned());
const SEED = 35;

describe("qwen35 handler (Qwen 3.5 dense as Ollama's legacy converter wrote it)", () => {
  it.each([
    { variant: "9b", sourceDtype: "f16" as const, mtp: true, markers: ["kv qwen35.vision.block_count", "kv qwen35.image_token_id", "kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved", "embedded MTP tensors mtp.*", "embedded vision tensors v.*"] },
    { variant: "9b-q8_0", sourceDtype: "f16" as const, mtp: true, markers: ["kv qwen35.vision.block_count", "kv qwen35.image_token_id", "kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved", "embedded MTP tensors mtp.*", "embedded vision tensors v.*"] },
    { variant: "9b", sourceDtype: "bf16" as const, mtp: true, markers: ["kv qwen35.vision.block_count", "kv qwen35.image_token_id", "kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved", "embedded MTP tensors mtp.*", "embedded vision tensors v.*"] },
    { variant: "9b-text", sourceDtype: "f16" as const, mtp: false, markers: ["kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved"] },
  ])("$variant ($sourceDtype): fixes hparams, renames ssm_dt, moves the MTP head to block 2 with its norms +1, hides v.*; real llama.cpp loads it; matches the native twin", async ({ variant, sourceDtype, mtp, markers }) => {
    const p = await proveHandler(await dir(), "qwen35", { seed: SEED, variant, sourceDtype, twin: twinOptions(false, mtp), nativeTwin: { load: variant !== "9b-q8_0" && sourceDtype === "f16" } });
    expect(p.view.report.handlers).toEqual([{ name: "qwen35", markers }]);
    await expectQwen35Translation(p, mtp);
    if (mtp) {
      expect(p.view.report.ops.map((o) => `${o.tensor} <- ${o.label}`).sort()).toEqual([...MTP_NORM_SHIFTS].sort());
      await expectMtpOpsElementwise(p, "qwen35", { variant, seed: SEED, sourceDtype }, false);
      await expectMtpDrafts(p.outPath);
    } else {
      expect(p.view.report.ops).toEqual([]);
    }
  });
});
