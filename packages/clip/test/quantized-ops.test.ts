/**
 * A tensor of a type an op cannot take is a typed error naming the tensor, never a crash or
 * a silent wrong value: a reshape that would leave a block-quantized tensor rows of partial
 * blocks, and ops that must read values out of a type with no F32 path.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgmlType, readTensorData, type GgufModel } from "@compat/gguf";
import { TranslationError } from "@compat/handlers";
import { clipViewModel } from "@compat/clip";
import { toF32 } from "@compat/tensor-ops";
import { encodeQ8_0, generateFixture } from "@compat/testkit";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "clip-quantized-ops-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** `name` stored as `type`, with `bytes` (a file Ollama's tools never wrote, but a GGUF may hold). */
async function retype(m: GgufModel, name: string, type: GgmlType, bytes: (values: Float32Array) => Uint8Array): Promise<void> {
  const t = m.findTensor(name)!;
  const values = toF32(t.type, await readTensorData(t), t.shape.reduce((a, b) => a * b, 1));
  t.type = type;
  t.data = { kind: "bytes", bytes: bytes(values) };
}

describe("ops on tensors they cannot take", () => {
  it("nemotron_h_omni: a Q8_0 patch embedding cannot take clip.cpp's [16, 16, 3, n] shape (rows of 16 are not whole blocks): ROWS_NOT_BLOCKS naming it", async () => {
    const m = generateFixture("nemotron_h_omni", { seed: 1, layout: "ollama", variant: "vl" }).text;
    await retype(m, "v.patch_embd.weight", GgmlType.Q8_0, encodeQ8_0);
    let error: unknown;
    try {
      clipViewModel(m);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(TranslationError);
    expect(error).toMatchObject({ code: "ROWS_NOT_BLOCKS", tensor: "v.patch_embd.weight", handler: "nemotron_h_omni-clip" });
    expect((error as Error).message).toMatch(/Q8_0.*\[16, 16, 3, 32\].*rows of 16/);
  });

  it("mistral3: [IMG_BREAK]'s row out of an I32 token_embd (no F32 path) fails the write with OP_FAILED naming the tensor; no file is left", async () => {
    const m = generateFixture("mistral3", { seed: 1, layout: "ollama", variant: "small-3.1" }).text;
    await retype(m, "token_embd.weight", GgmlType.I32, (v) => new Uint8Array(v.length * 4));
    const view = clipViewModel(m)!;
    const out = join(dir, "mistral3-i32.gguf");
    await expect(view.writeTo(out)).rejects.toMatchObject({ code: "OP_FAILED", tensor: "v.token_embd.img_break", handler: "mistral3-clip" });
    await expect(view.read(0, 1 << 20)).rejects.toThrow(/row 12 of token_embd\.weight.*\(I32/);
    expect((await readdir(dir)).filter((f) => f.startsWith("mistral3-i32"))).toEqual([]);
    await view.close();
  });

  it("qwen3vl: a V projection of a type with no F32 path cannot be joined with F16 Q/K: OP_FAILED naming the fused tensor and its inputs", async () => {
    const m = generateFixture("qwen3vl", { seed: 1, layout: "ollama", variant: "default" }).text;
    await retype(m, "v.blk.0.attn_v.weight", GgmlType.I32, (v) => new Uint8Array(v.length * 4));
    const view = clipViewModel(m)!;
    const error = await view.writeTo(join(dir, "qwen3vl-i32.gguf")).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ code: "OP_FAILED", tensor: "v.blk.0.attn_qkv.weight" });
    expect((error as Error).message).toMatch(/v\.blk\.0\.attn_q\.weight \(F16.*v\.blk\.0\.attn_v\.weight \(I32/);
    await view.close();
  });
});
