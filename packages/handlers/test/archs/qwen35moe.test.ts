import { afterAll, describe, expect, it } from "vitest";
import { GgmlType, GgufModel, GgufValueType, readGguf, writeGguf, readTensorData } from "@compat/gguf";
import { translateModel } from "@compat/handlers";
import { killAllSpawned, runLoaderInSubprocess } from "@compat/testkit";
import { addF32, tempDir } from "../helpers";
import { join } from "node:path";
import { NO_DIFFERENCES, proveHandler } from "../proof";
import { expectMtpDrafts, expectNativeProfile, MTP_BLOCK, MTP_NORM_SHIFTS, proveQwen35Reference, twinOptions } from "./qwen35-family";

const dir = tempDir();
afterAll(() => killAllSpawned());
const SEED = 36;
/** The reference output of 35b-a3b (f16), for the native profile's comparison. */
let referenceOut: string | undefined;

const FULL_MARKERS = [
  "kv qwen35moe.vision.block_count",
  "kv qwen35moe.image_token_id",
  "kv qwen35moe.ssm.v_head_reordered",
  "kv qwen35moe.feed_forward_length",
  "kv qwen35moe.rope.mrope_interleaved",
  "embedded MTP tensors mtp.*",
  "embedded vision tensors v.*",
];

const stacks = (label: string) => ["down", "gate", "up"].map((p) => `blk.${MTP_BLOCK}.ffn_${p}_exps.weight <- ${label}`);

// Each case loads the output and the twin in llama.cpp and starts llama-server two or three
// times (the MTP head's drafts): more than the default minute on a busy two-core machine.
describe("qwen35moe handler (Qwen 3.5 MoE as Ollama's legacy converter wrote it)", { timeout: 240_000 }, () => {
  it.each([
    { variant: "35b-a3b", sourceDtype: "f16" as const, mtp: true, markers: FULL_MARKERS, ops: [...MTP_NORM_SHIFTS, ...stacks("stack experts")] },
    { variant: "35b-a3b", sourceDtype: "bf16" as const, mtp: true, markers: FULL_MARKERS, ops: [...MTP_NORM_SHIFTS, ...stacks("stack experts")] },
    { variant: "35b-a3b-q8_0", sourceDtype: "f16" as const, mtp: true, markers: FULL_MARKERS, ops: [...MTP_NORM_SHIFTS, ...stacks("stack experts")] },
    {
      variant: "35b-a3b-text",
      sourceDtype: "f16" as const,
      mtp: false,
      markers: ["kv qwen35moe.ssm.v_head_reordered", "kv qwen35moe.feed_forward_length", "kv qwen35moe.rope.mrope_interleaved"],
      ops: [],
    },
  ])("$variant ($sourceDtype): fixes hparams, renames ssm_dt, moves the MTP head to block 2 (norms +1, experts stacked), hides v.*; real llama.cpp loads it; matches the native twin", async (c) => {
    const loadTwin = (c.variant === "35b-a3b" || c.variant === "35b-a3b-text") && c.sourceDtype === "f16";
    const p = await proveQwen35Reference(await dir(), "qwen35moe", SEED, c, loadTwin);
    if (c.variant === "35b-a3b" && c.sourceDtype === "f16") referenceOut = p.outPath;
  });

  it("native profile (qwen35moe-mtp-norms-once): the MTP layer norms equal the twin's; llama-server's MTP head drafts the twin's tokens, the reference output's MTP head drafts others", async () => {
    const p = await proveHandler(join(await dir(), "native-profile"), "qwen35moe", { seed: SEED, variant: "35b-a3b", twin: twinOptions(true, true), nativeTwin: { load: true } });
    await expectNativeProfile(p, "qwen35moe", referenceOut);
  });
});

describe("qwen35moe handler: MTP experts of two types (35b-a3b-mixed)", () => {
  const gate = `blk.${MTP_BLOCK}.ffn_gate_exps.weight`;

  it("native (qwen35moe-mtp-mixed-experts-f32): the gate experts stack as F32; real llama.cpp loads the file and its MTP head drafts", async () => {
    const p = await proveHandler(join(await dir(), "mixed-native"), "qwen35moe", { seed: SEED, variant: "35b-a3b-mixed", twin: twinOptions(true, true, [gate]) });
    expect(p.view.report.fixes.map((f) => f.name)).toEqual(["qwen35moe-mtp-norms-once", "qwen35moe-mtp-mixed-experts-f32"]);
    expect(p.view.report.ops.map((o) => `${o.tensor} <- ${o.label}`)).toContain(`${gate} <- stack experts (promoted to F32)`);
    expect(p.translatedModel.findTensor(gate)?.type).toBe(GgmlType.F32);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBe(4);
    await expectMtpDrafts(p.outPath);
  });

  it("reference: that stack is refused as the reference refuses it; llama.cpp then rejects the file", async () => {
    const p = await proveHandler(join(await dir(), "mixed-reference"), "qwen35moe", { seed: SEED, variant: "35b-a3b-mixed", profile: "reference", twin: twinOptions(true, true) });
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["qwen35moe-mtp-norms-once", "qwen35moe-mtp-mixed-experts-f32"]);
    expect(p.translatedModel.hasTensor(gate)).toBe(false);
    expect(p.diff.missingTensors).toEqual([gate]);
    // a skipped MTP tensor must still exist: llama.cpp refuses the file even without loading the MTP head
    expect(p.load.ok ? "loaded" : p.load.error).toContain(`missing tensor '${gate}'`);
  });
});

/** A bare Ollama-style qwen35moe model: 2 trunk blocks plus whatever MTP tensors the case adds. */
function bareQwen35moe(mtp: Array<[name: string, shape: number[], type?: number]>): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "qwen35moe");
  m.setU32("qwen35moe.block_count", 2);
  m.setU32("qwen35moe.feed_forward_length", 0);
  m.setArray("qwen35moe.attention.head_count_kv", GgufValueType.UINT32, [0, 2]);
  m.setArray("qwen35moe.rope.dimension_sections", GgufValueType.INT32, [11, 11, 10]);
  addF32(m, "blk.0.attn_norm.weight", [4]);
  addF32(m, "blk.1.attn_norm.weight", [4]);
  for (const [name, shape, type] of mtp) {
    if (type === GgmlType.F16) m.addTensor({ name, type, shape, data: { kind: "bytes", bytes: new Uint8Array(shape.reduce((a, b) => a * b, 2)) } });
    else addF32(m, name, shape);
  }
  return m;
}

describe("qwen35moe MTP rules on bare models (the reference's edge cases)", () => {
  it("pads three sections as i32 and collapses head_count_kv", () => {
    const out = translateModel(bareQwen35moe([]))!.model;
    expect(out.getNumberArray("qwen35moe.rope.dimension_sections")).toEqual([11, 11, 10, 0]);
    expect(out.getArray("qwen35moe.rope.dimension_sections").itemType).toBe(GgufValueType.INT32);
    expect(out.getU32("qwen35moe.attention.head_count_kv")).toBe(2);
    expect(out.has("qwen35moe.nextn_predict_layers")).toBe(false);
  });

  it("two MTP layers: layers renamed to blocks 2 and 3, the shared head left hidden", () => {
    const out = translateModel(bareQwen35moe([["mtp.layers.0.attn_norm.weight", [4]], ["mtp.layers.1.attn_q.weight", [4, 4]], ["mtp.fc.weight", [8, 4]]]))!;
    expect(out.model.getU32("qwen35moe.nextn_predict_layers")).toBe(2);
    expect(out.model.getU32("qwen35moe.block_count")).toBe(4);
    expect(out.model.tensors.map((t) => t.name)).toEqual(["blk.0.attn_norm.weight", "blk.1.attn_norm.weight", "blk.2.attn_norm.weight", "blk.3.attn_q.weight"]);
    expect(out.report.tensors.hidden).toEqual(["mtp.fc.weight"]);
  });

  it("an expert gap or mixed shapes: no stack, the experts stay hidden", () => {
    const gap = translateModel(bareQwen35moe([["mtp.layers.0.mlp.experts.0.up_proj.weight", [4, 4]], ["mtp.layers.0.mlp.experts.2.up_proj.weight", [4, 4]]]))!;
    expect(gap.report.ops).toEqual([]);
    expect(gap.report.tensors.hidden).toHaveLength(2);
    const shapes = translateModel(bareQwen35moe([["mtp.layers.0.mlp.experts.0.up_proj.weight", [4, 4]], ["mtp.layers.0.mlp.experts.1.up_proj.weight", [4, 8]]]))!;
    expect(shapes.report.ops).toEqual([]);
  });

  it("a file that already has llama.cpp's MTP names is left to the other fixes; mtp.* hidden", () => {
    const m = bareQwen35moe([["mtp.fc.weight", [8, 4]]]);
    addF32(m, "blk.2.nextn.eh_proj.weight", [8, 4]);
    const out = translateModel(m)!;
    expect(out.model.has("qwen35moe.nextn_predict_layers")).toBe(false);
    expect(out.report.tensors.hidden).toEqual(["mtp.fc.weight"]);
  });

  it("mixed F32/F16 experts stack as F32 in expert order; the stack's values are each expert's", async () => {
    const out = translateModel(bareQwen35moe([["mtp.layers.0.mlp.experts.0.down_proj.weight", [2, 2]], ["mtp.layers.0.mlp.experts.1.down_proj.weight", [2, 2], GgmlType.F16]]))!;
    const t = out.model.findTensor("blk.2.ffn_down_exps.weight")!;
    expect([t.type, t.shape]).toEqual([GgmlType.F32, [2, 2, 2]]);
    const values = new Float32Array((await readTensorData(t)).slice().buffer);
    expect(Array.from(values)).toEqual([0, 1, 2, 3, 0, 0, 0, 0]);
  });
});
