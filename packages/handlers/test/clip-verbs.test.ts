import { GgmlType, GgufModel, bufferSource, layoutGguf, readGguf, serializeGguf, type ByteSource, type GgufTensor, readTensorData } from "@compat/gguf";
import { permuteQKRows, promoteF16ToF32, rowAsF32Tensor, translateModel, TranslationError, type Handler, type Translation } from "@compat/handlers";
import { f16ToNumber, numberToF16 } from "@compat/tensor-ops";
import { describe, expect, it } from "vitest";
import { addF32, onDisk, tempDir } from "./helpers";

/** Runs one ad-hoc handler (gated on "toy") over a model and returns the view. */
function run(m: GgufModel, apply: (t: Translation) => void) {
  const h: Handler = { name: "toy", arch: "toy", detect: () => ["toy"], apply };
  return translateModel(m, { handlers: [h] })!;
}

function toy(): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "toy");
  m.setU32("toy.block_count", 1);
  m.setU32("clip.vision.block_count", 1);
  return m;
}

/** An F16 tensor whose element i holds the half nearest to `f(i)`. */
function addF16(m: GgufModel, name: string, shape: number[], f: (i: number) => number): void {
  const n = shape.reduce((a, b) => a * b, 1);
  const halves = new Uint16Array(n);
  for (let i = 0; i < n; i++) halves[i] = numberToF16(f(i));
  m.addTensor({ name, type: GgmlType.F16, shape, data: { kind: "bytes", bytes: new Uint8Array(halves.buffer) } });
}

const f32 = async (t: GgufTensor) => {
  const b = await readTensorData(t);
  return Array.from(new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)));
};
const f16 = async (t: GgufTensor) => {
  const b = await readTensorData(t);
  return Array.from(new Uint16Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)), f16ToNumber);
};

const scratch = tempDir();

describe("verbs for views that keep part of a file (the clip side)", () => {
  it("keepOnly hides every tensor outside the prefixes, by final name; keepKeysOnly drops keys likewise", () => {
    const m = toy();
    addF32(m, "token_embd.weight", [4, 2]);
    addF32(m, "v.a.weight", [4]);
    addF32(m, "mm.b.weight", [4]);
    addF32(m, "s.c.weight", [4]);
    const view = run(m, (t) => {
      t.keepOnly(["v.", "mm."]);
      t.keepKeysOnly(["general.", "clip."]);
      t.renameTensor("s.c.weight", "v.sam.c.weight"); // renamed after keepOnly: judged by the final name
      t.setU32("clip.vision.head_count", 2); // set after keepKeysOnly: kept
    });
    expect(view.model.tensors.map((t) => t.name)).toEqual(["v.a.weight", "mm.b.weight", "v.sam.c.weight"]);
    expect(view.report.tensors.hidden).toEqual(["token_embd.weight"]);
    expect(view.model.keys().sort()).toEqual(["clip.vision.block_count", "clip.vision.head_count", "general.architecture"]);
    expect(view.report.kv.removed).toEqual(["toy.block_count"]);
  });

  it("promoteF16ToF32 converts F16 exactly and leaves other types alone", async () => {
    const m = toy();
    addF16(m, "v.h", [3, 2], (i) => i * 0.3 - 1);
    addF32(m, "v.f", [3], 7);
    const view = run(m, (t) => {
      promoteF16ToF32(t, "v.h");
      promoteF16ToF32(t, "v.f");
      promoteF16ToF32(t, "v.missing");
    });
    const h = view.model.findTensor("v.h")!;
    expect(h.type).toBe(GgmlType.F32);
    expect(await f32(h)).toEqual(await f16(m.findTensor("v.h")!));
    expect(view.model.findTensor("v.f")!.type).toBe(GgmlType.F32);
    expect(view.report.ops.map((o) => o.tensor)).toEqual(["v.h"]);
  });

  it("promoteF16ToF32 of a tensor of several MiB read from a file (its input and output in largeBytes memory) is exact", async () => {
    const dir = await scratch();
    const m = toy();
    const n = 3 << 20; // 6 MiB of F16 in, 12 MiB of F32 out: both past largeBytes' 4 MiB
    addF16(m, "v.big", [1024, n / 1024], (i) => ((i * 7919) % 65_519) / 64 - 511);
    const { model } = await onDisk(dir, "big.gguf", m);
    try {
      expect(model.findTensor("v.big")!.data.kind).toBe("range");
      const view = run(model, (t) => promoteF16ToF32(t, "v.big"));
      const got = await readTensorData(view.model.findTensor("v.big")!);
      expect(got.length).toBe(n * 4);
      const floats = new Float32Array(got.buffer, got.byteOffset, n);
      const halves = await readTensorData(m.findTensor("v.big")!);
      const h16 = new Uint16Array(halves.buffer, halves.byteOffset, n);
      let wrong = 0;
      for (let i = 0; i < n; i++) if (!Object.is(floats[i], f16ToNumber(h16[i]!))) wrong++;
      expect(wrong).toBe(0);
    } finally {
      await model.close();
    }
  });

  it("permuteQKRows moves rows as convert_hf_to_gguf's LLaMA permute does (checked against the index formula)", async () => {
    const nHead = 2;
    const rows = 8;
    const cols = 3;
    const m = toy();
    addF16(m, "v.q", [cols, rows], (i) => i);
    const view = run(m, (t) => permuteQKRows(t, "v.q", nHead));
    const got = await f16(view.model.findTensor("v.q")!);
    const hd = rows / nHead;
    for (let oa = 0; oa < rows; oa++) {
      const h = Math.floor(oa / hd);
      const i = Math.floor((oa % hd) / 2);
      const ob = h * hd + (oa % 2) * (hd / 2) + i;
      for (let c = 0; c < cols; c++) expect(got[oa * cols + c]).toBe(ob * cols + c);
    }
  });

  it("permuteQKRows refuses rows that do not split into heads", () => {
    const m = toy();
    addF32(m, "v.q", [2, 6]);
    expect(() => run(m, (t) => permuteQKRows(t, "v.q", 4))).toThrow(TranslationError);
  });

  it("rowAsF32Tensor copies one row of a matrix as a new F32 tensor; silent on a missing row", async () => {
    const m = toy();
    addF16(m, "token_embd.weight", [4, 3], (i) => i + 0.5);
    const view = run(m, (t) => {
      rowAsF32Tensor(t, "v.row", "token_embd.weight", 1);
      rowAsF32Tensor(t, "v.none", "token_embd.weight", 3);
    });
    const row = view.model.findTensor("v.row")!;
    expect(row.type).toBe(GgmlType.F32);
    expect(row.shape).toEqual([4]);
    expect(await f32(row)).toEqual([4.5, 5.5, 6.5, 7.5]);
    expect(view.model.hasTensor("v.none")).toBe(false);
    expect(view.report.ops).toEqual([{ tensor: "v.row", label: "row 1 of token_embd.weight as F32", inputs: ["token_embd.weight"] }]);
  });

  it("rowAsF32Tensor reads only that row of a file-backed matrix", async () => {
    const m = toy();
    addF16(m, "token_embd.weight", [256, 4096], (i) => (i % 997) / 64); // 2 MiB
    const bytes = await serializeGguf(m);
    const layout = layoutGguf(m);
    const reads: Array<[number, number]> = [];
    const inner = bufferSource(bytes, "counting");
    const counting: ByteSource = { name: "counting", size: inner.size, read: (o, n) => (reads.push([o, n]), inner.read(o, n)) };
    const model = await readGguf(counting);
    const view = run(model, (t) => rowAsF32Tensor(t, "v.row", "token_embd.weight", 4000));
    reads.length = 0;
    const got = await f32(view.model.findTensor("v.row")!);
    expect(got).toEqual(Array.from({ length: 256 }, (_, i) => f16ToNumber(numberToF16(((4000 * 256 + i) % 997) / 64))));
    const rowStart = layout.dataOffset + layout.tensorOffsets[0]! + 4000 * 256 * 2;
    expect(reads).toEqual([[rowStart, 512]]);
  });
});
