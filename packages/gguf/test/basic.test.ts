import { mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  GgmlType,
  GgufError,
  GgufModel,
  GgufValueType,
  layoutGguf,
  parseGguf,
  readGguf,
  readTensorData,
  serializeGguf,
  summarize,
  tensorByteSize,
  writeGguf,
  ggufArray,
  blobSource,
  fileSource,
  ggmlTypeInfo,
  allGgmlTypes,
} from "@compat/gguf";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "gguf-basic-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function sampleModel(): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "llama");
  m.setString("general.name", "tiny ✓");
  m.setU32("llama.context_length", 128);
  m.setF32("llama.rope.freq_base", 10000);
  m.setBool("flag", true);
  m.setU64("big", 2n ** 60n);
  m.set("i8", GgufValueType.INT8, -5);
  m.set("f64", GgufValueType.FLOAT64, Math.PI);
  m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, ["<s>", "</s>", "héllo", ""]);
  m.setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, [0, -1.5, 2.25, 3]);
  m.setArray("nested", GgufValueType.ARRAY, [ggufArray(GgufValueType.INT32, [1, 2]), ggufArray(GgufValueType.STRING, ["a"])]);
  m.setArray("empty", GgufValueType.UINT16, []);
  const a = new Uint8Array(tensorByteSize(GgmlType.F32, [4, 3])).map((_, i) => i);
  const b = new Uint8Array(tensorByteSize(GgmlType.Q4_0, [64])).map((_, i) => 255 - i);
  m.addTensor({ name: "a", type: GgmlType.F32, shape: [4, 3], data: { kind: "bytes", bytes: a } });
  m.addTensor({ name: "b", type: GgmlType.Q4_0, shape: [64], data: { kind: "bytes", bytes: b } });
  return m;
}

describe("round trip", () => {
  it("serializes, parses and reserializes identically", async () => {
    const m = sampleModel();
    const bytes = await serializeGguf(m);
    const layout = layoutGguf(m);
    expect(bytes.length).toBe(layout.totalSize);
    expect(layout.dataOffset % 32).toBe(0);
    const r = parseGguf(bytes);
    expect(r.version).toBe(3);
    expect(r.getString("general.name")).toBe("tiny ✓");
    expect(r.getNumber("llama.context_length")).toBe(128);
    expect(r.getBigInt("big")).toBe(2n ** 60n);
    expect(r.getNumber("i8")).toBe(-5);
    expect(r.getBool("flag")).toBe(true);
    expect(r.getStringArray("tokenizer.ggml.tokens")).toEqual(["<s>", "</s>", "héllo", ""]);
    expect(r.getNumberArray("tokenizer.ggml.scores")).toEqual([0, -1.5, 2.25, 3]);
    const nested = r.getArray("nested");
    expect(nested.itemType).toBe(GgufValueType.ARRAY);
    expect((nested.at(1) as { toArray(): unknown[] }).toArray()).toEqual(["a"]);
    expect(r.keys()).toEqual(m.keys());
    expect(r.tensors.map((t) => t.name)).toEqual(["a", "b"]);
    expect(await readTensorData(r.tensor("a"))).toEqual(await readTensorData(m.tensor("a")));
    const again = await serializeGguf(r);
    expect(again).toEqual(bytes);
  });

  it("writes atomically to a path and reads back through a file source", async () => {
    const m = sampleModel();
    const path = join(dir, "out.gguf");
    const res = await writeGguf(m, path);
    expect((await readdir(dir)).filter((f) => f.endsWith(".tmp"))).toEqual([]);
    const onDisk = new Uint8Array(await readFile(path));
    expect(onDisk.length).toBe(res.bytesWritten);
    expect(onDisk).toEqual(await serializeGguf(m));
    const r = await readGguf(path, { initialChunk: 64 });
    try {
      expect(r.tensor("b").data).toMatchObject({ kind: "range", length: 36 });
      expect(await readTensorData(r.tensor("b"))).toEqual(await readTensorData(m.tensor("b")));
      // rewrite from the file source
      const path2 = join(dir, "out2.gguf");
      await writeGguf(r, path2);
      expect(new Uint8Array(await readFile(path2))).toEqual(onDisk);
    } finally {
      await r.close();
    }
  });

  it("reads from a Blob and a ByteSource", async () => {
    const bytes = await serializeGguf(sampleModel());
    const fromBlob = await readGguf(new Blob([bytes]), { initialChunk: 100 });
    expect(fromBlob.getString("general.architecture")).toBe("llama");
    expect(await readTensorData(fromBlob.tensor("a"))).toEqual(await readTensorData(sampleModel().tensor("a")));
    const src = blobSource(new Blob([bytes]));
    expect((await readGguf(src)).tensors.length).toBe(2);
    const path = join(dir, "fs.gguf");
    await writeFile(path, bytes);
    const fsrc = await fileSource(path);
    expect((await readGguf(fsrc)).kvCount).toBe(12);
    await fsrc.close?.();
  });

  it("reports I/O problems as GgufError IO", async () => {
    await expect(readGguf(join(dir, "missing.gguf"))).rejects.toMatchObject({ name: "GgufError", code: "IO" });
    await expect(readGguf(dir)).rejects.toMatchObject({ name: "GgufError", code: "IO" });
    await expect(writeGguf(sampleModel(), join(dir, "no/such/dir/x.gguf"))).rejects.toMatchObject({ name: "GgufError", code: "IO" });
  });

  it("removes the temp file when writing fails", async () => {
    const m = sampleModel();
    m.tensors.push({ name: "bad", type: GgmlType.F32, shape: [2], data: { kind: "computed", length: 8, label: "x", produce: async () => new Uint8Array(4) } });
    await expect(writeGguf(m, join(dir, "bad.gguf"))).rejects.toMatchObject({ code: "DATA_LENGTH" });
    expect((await readdir(dir)).filter((f) => f.includes("bad"))).toEqual([]);
  });
});

describe("model", () => {
  it("keeps key positions on replace and appends new keys", () => {
    const m = sampleModel();
    const before = m.keys();
    m.setU32("llama.context_length", 4096);
    expect(m.keys()).toEqual(before);
    m.setString("new.key", "x");
    expect(m.keys().at(-1)).toBe("new.key");
    expect(m.delete("flag")).toBe(true);
    expect(m.has("flag")).toBe(false);
  });

  it("typed getters throw KV_TYPE / KV_MISSING", () => {
    const m = sampleModel();
    expect(() => m.getString("llama.context_length")).toThrow(GgufError);
    expect(() => m.getString("llama.context_length")).toThrow(/UINT32/);
    try {
      m.getNumber("nope");
    } catch (e) {
      expect((e as GgufError).code).toBe("KV_MISSING");
    }
    expect(m.getNumber("nope", 7)).toBe(7);
    expect(m.tryGetString("nope")).toBeUndefined();
    expect(() => m.getU32("i8")).toThrow(expect.objectContaining({ code: "KV_TYPE" }));
    expect(() => m.getNumber("big")).toThrow(expect.objectContaining({ code: "KV_TYPE" }));
    expect(() => m.setU32("x", -1)).toThrow(expect.objectContaining({ code: "BAD_VALUE" }));
  });

  it("tryGet… return undefined for a missing key or another type, and never throw", () => {
    const m = sampleModel();
    expect(m.tryGetString("llama.context_length")).toBeUndefined();
    expect(m.tryGetBool("llama.context_length")).toBeUndefined();
    expect(m.tryGetNumber("big")).toBeUndefined();
    expect(m.tryGetBigInt("general.architecture")).toBeUndefined();
    expect(m.tryGetArray("llama.context_length")).toBeUndefined();
    expect(m.tryGetNumber("llama.context_length")).toBe(m.getNumber("llama.context_length"));
  });

  it("edits tensors", () => {
    const m = sampleModel();
    expect(() => m.renameTensor("a", "b")).toThrow(expect.objectContaining({ code: "DUPLICATE_TENSOR" }));
    m.renameTensor("a", "c");
    expect(m.hasTensor("a")).toBe(false);
    const t = m.dropTensor("b");
    m.addTensor(t, { before: "c" });
    expect(m.tensors.map((x) => x.name)).toEqual(["b", "c"]);
    expect(() => m.addTensor({ ...t })).toThrow(expect.objectContaining({ code: "DUPLICATE_TENSOR" }));
    const c = m.clone();
    c.renameTensor("c", "d");
    c.setU32("llama.context_length", 1);
    expect(m.hasTensor("c")).toBe(true);
    expect(m.getNumber("llama.context_length")).toBe(128);
  });

  it("replaces a tensor in place with checks", () => {
    const m = sampleModel();
    const bytes = new Uint8Array(tensorByteSize(GgmlType.F16, [4, 3]));
    m.replaceTensor("a", { name: "a16", type: GgmlType.F16, shape: [4, 3], data: { kind: "bytes", bytes } });
    expect(m.tensors.map((t) => t.name)).toEqual(["a16", "b"]);
    expect(() => m.replaceTensor("a16", { name: "b", type: GgmlType.F16, shape: [4, 3], data: { kind: "bytes", bytes } })).toThrow(
      expect.objectContaining({ code: "DUPLICATE_TENSOR" }),
    );
    expect(() => m.replaceTensor("a16", { name: "a16", type: GgmlType.F16, shape: [4, 4], data: { kind: "bytes", bytes } })).toThrow(
      expect.objectContaining({ code: "DATA_LENGTH" }),
    );
    expect(() => m.replaceTensor("a16", { name: "a16", type: GgmlType.Q4_0, shape: [16], data: { kind: "bytes", bytes } })).toThrow(
      expect.objectContaining({ code: "BAD_SHAPE" }),
    );
  });

  it("has the full ggml type table", () => {
    expect(ggmlTypeInfo(GgmlType.BF16)).toEqual({ name: "bf16", blockSize: 1, typeSize: 2, quantized: false });
    expect(ggmlTypeInfo(GgmlType.Q4_K)).toEqual({ name: "q4_K", blockSize: 256, typeSize: 144, quantized: true });
    expect(ggmlTypeInfo(GgmlType.MXFP4)).toEqual({ name: "mxfp4", blockSize: 32, typeSize: 17, quantized: true });
    expect(ggmlTypeInfo(GgmlType.NVFP4)).toMatchObject({ blockSize: 64, typeSize: 36 });
    expect(ggmlTypeInfo(GgmlType.TQ1_0)).toMatchObject({ blockSize: 256, typeSize: 54 });
    expect(ggmlTypeInfo(GgmlType.IQ4_XS)).toMatchObject({ blockSize: 256, typeSize: 136 });
    expect(ggmlTypeInfo(GgmlType.Q1_0)).toMatchObject({ blockSize: 128, typeSize: 18 });
    expect(allGgmlTypes()).toHaveLength(35);
    expect(() => ggmlTypeInfo(4)).toThrow(expect.objectContaining({ code: "BAD_GGML_TYPE" }));
    expect(tensorByteSize(GgmlType.Q8_0, [64, 3])).toBe(2 * 34 * 3);
    expect(() => tensorByteSize(GgmlType.Q8_0, [48])).toThrow(expect.objectContaining({ code: "BAD_SHAPE" }));
    expect(() => tensorByteSize(GgmlType.F32, [2 ** 30, 2 ** 30, 2 ** 30])).toThrow(expect.objectContaining({ code: "SHAPE_OVERFLOW" }));
  });

  it("summarizes", () => {
    const m = sampleModel();
    m.setU32("general.file_type", 15);
    const s = summarize(m);
    expect(s).toMatchObject({ architecture: "llama", name: "tiny ✓", parameterCount: 76, fileType: "Q4_K_M", tensorCount: 2 });
    expect(s.bytesByType).toEqual({ f32: 48, q4_0: 36 });
  });
});
