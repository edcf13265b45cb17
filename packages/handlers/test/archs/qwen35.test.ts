import { afterAll, describe, expect, it } from "vitest";
import { killAllSpawned } from "@compat/testkit";
import { tempDir } from "../helpers";
import { join } from "node:path";
import { proveHandler } from "../proof";
import { expectNativeProfile, MTP_NORM_SHIFTS, proveQwen35Reference, twinOptions } from "./qwen35-family";

const dir = tempDir();
afterAll(() => killAllSpawned());
const SEED = 35;
/** The reference output of 9b (f16), for the native profile's comparison. */
let referenceOut: string | undefined;

const FULL_MARKERS = ["kv qwen35.vision.block_count", "kv qwen35.image_token_id", "kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved", "embedded MTP tensors mtp.*", "embedded vision tensors v.*"];

// Each case loads the output and the twin in llama.cpp and starts llama-server two or three
// times (the MTP head's drafts): more than the default minute on a busy two-core machine.
describe("qwen35 handler (Qwen 3.5 dense as Ollama's legacy converter wrote it)", { timeout: 240_000 }, () => {
  it.each([
    { variant: "9b", sourceDtype: "f16" as const, mtp: true, markers: FULL_MARKERS, ops: MTP_NORM_SHIFTS },
    { variant: "9b-q8_0", sourceDtype: "f16" as const, mtp: true, markers: FULL_MARKERS, ops: MTP_NORM_SHIFTS },
    { variant: "9b", sourceDtype: "bf16" as const, mtp: true, markers: FULL_MARKERS, ops: MTP_NORM_SHIFTS },
    { variant: "9b-text", sourceDtype: "f16" as const, mtp: false, markers: ["kv qwen35.ssm.v_head_reordered", "kv qwen35.rope.mrope_interleaved"], ops: [] },
  ])("$variant ($sourceDtype): fixes hparams, renames ssm_dt, moves the MTP head to block 2 with its norms +1, hides v.*; real llama.cpp loads it; matches the native twin", async (c) => {
    const p = await proveQwen35Reference(await dir(), "qwen35", SEED, c, c.variant !== "9b-q8_0" && c.sourceDtype === "f16");
    if (c.variant === "9b" && c.sourceDtype === "f16") referenceOut = p.outPath;
  });

  it("native profile (qwen35-mtp-norms-once): the MTP layer norms equal the twin's; llama-server's MTP head drafts the twin's tokens, the reference output's MTP head drafts others", async () => {
    const p = await proveHandler(join(await dir(), "native-profile"), "qwen35", { seed: SEED, variant: "9b", twin: twinOptions(false, true), nativeTwin: { load: true } });
    // the four layer norms are native now; the head norms still get their +1
    expect(p.view.report.ops.map((o) => o.label).filter((l) => l === "F32 norm +1")).toHaveLength(3);
    await expectNativeProfile(p, "qwen35", referenceOut);
  });
});
