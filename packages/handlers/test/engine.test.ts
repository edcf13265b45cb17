import { readFile, readdir } from "node:fs/promises";
import { join } from "node:path";
import { kernelRangeCopier } from "@compat/files";
import { GgmlType, GgufModel, bufferSource, layoutGguf, parseGguf, readGguf, serializeGguf, type ByteSource } from "@compat/gguf";
import { translate, translateModel, Translation, type Handler } from "@compat/handlers";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { addF32, ollamaGemma3Start, onDisk, tempDir, writeOnDisk } from "./helpers";

const dir = tempDir();

/** A tiny gemma3 file with Ollama's 4B-style quirks: vision tensors inline, no rms eps. */
function ollamaGemma3(): GgufModel {
  const m = ollamaGemma3Start();
  addF32(m, "mm.mm_input_projection.weight", [8, 8], 2);
  addF32(m, "v.patch_embd.weight", [4, 4], 3);
  addF32(m, "output_norm.weight", [8], 4);
  return m;
}

describe("translateModel", () => {
  it("returns null for a file no handler recognizes", () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "llama");
    addF32(m, "token_embd.weight", [4, 4]);
    expect(translateModel(m)).toBeNull();
  });

  it("returns null when OLLAMA_LLAMA_CPP_COMPAT=0, and only for the literal 0", () => {
    const m = ollamaGemma3();
    expect(translateModel(m, { env: { OLLAMA_LLAMA_CPP_COMPAT: "0" } })).toBeNull();
    expect(translateModel(m, { env: { OLLAMA_LLAMA_CPP_COMPAT: "false" } })).not.toBeNull();
    expect(translateModel(m, { env: {} })).not.toBeNull();
  });

  it("applies gemma3: injected defaults, truncated vocab, hidden vision tensors, source untouched", () => {
    const src = ollamaGemma3();
    const before = src.kvs().map((kv) => kv.key);
    const view = translateModel(src)!;
    const out = view.model;
    expect(out.getNumber("gemma3.attention.layer_norm_rms_epsilon")).toBeCloseTo(1e-6);
    expect(out.getString("gemma3.rope.scaling.type")).toBe("linear");
    expect(out.getStringArray("tokenizer.ggml.tokens")).toEqual(["<pad>", "<eos>", "a", "b"]);
    expect(out.getNumberArray("tokenizer.ggml.token_type")).toEqual([3, 3, 1, 1]);
    expect(out.tensors.map((t) => t.name)).toEqual(["token_embd.weight", "output_norm.weight"]);
    expect(view.report.tensors.hidden).toEqual(["mm.mm_input_projection.weight", "v.patch_embd.weight"]);
    expect(view.report.kv.changed).toEqual(["tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"]);
    expect(view.report.kv.added).toContain("tokenizer.chat_template");
    // the source model is not modified
    expect(src.kvs().map((kv) => kv.key)).toEqual(before);
    expect(src.tensors).toHaveLength(4);
    expect(src.getStringArray("tokenizer.ggml.tokens")).toHaveLength(5);
  });

  it("lets an arch-renaming handler decide what runs after it (embeddinggemma before gemma3)", () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "gemma3");
    m.setU32("gemma3.attention.sliding_window", 512);
    m.setBool("gemma3.attention.causal", false);
    addF32(m, "token_embd.weight", [8, 4]);
    addF32(m, "dense.0.weight", [8, 16]);
    addF32(m, "dense.1.weight", [16, 8]);
    addF32(m, "norm.weight", [8]);
    const view = translateModel(m)!;
    expect(view.report.handlers.map((h) => h.name)).toEqual(["embeddinggemma"]);
    expect(view.model.getString("general.architecture")).toBe("gemma-embedding");
    expect(view.model.has("gemma-embedding.attention.causal")).toBe(false);
    expect(view.model.getU32("gemma-embedding.dense_2_feat_out")).toBe(16);
    expect(view.model.tensors.map((t) => t.name)).toEqual(["token_embd.weight", "dense_2.weight", "dense_3.weight", "output_norm.weight"]);
    expect(view.model.has("tokenizer.chat_template")).toBe(false); // gemma3 did not run
  });

  it("is idempotent: translating a translated model is a no-op", () => {
    const view = translateModel(ollamaGemma3())!;
    expect(translateModel(view.model)).toBeNull();
  });
});

describe("translate()", () => {
  it("reads only the header: a metadata-only translation never touches tensor data", async () => {
    const m = ollamaGemma3();
    addF32(m, "blk.0.ffn_up.weight", [1024, 4096], 5); // 16 MiB of tensor data
    const bytes = await serializeGguf(m);
    const dataStart = layoutGguf(parseGguf(bytes)).dataOffset;
    let furthest = 0;
    const source = bufferSource(bytes, "counting");
    const counting: ByteSource = {
      name: "counting",
      size: source.size,
      read: (offset, length) => {
        furthest = Math.max(furthest, offset + length);
        return source.read(offset, length);
      },
    };
    const view = await translate(counting);
    expect(view).not.toBeNull();
    // the reader's first chunk is 1 MiB however small the header is; it never reads on into the data
    expect(furthest).toBeLessThanOrEqual(Math.max(dataStart, 1 << 20));
  });
});

describe("TranslatedView", () => {
  it("writeTo copies untouched tensors in the kernel and writes the same bytes as the read/write path", async () => {
    const { nativeFileCopy } = await import("@compat/tensor-ops");
    const copier = kernelRangeCopier(nativeFileCopy());
    const m = ollamaGemma3();
    addF32(m, "blk.0.ffn_up.weight", [256, 1024], 5); // 1 MiB untouched range
    const { path } = await writeOnDisk(await dir(), "gemma3-kcopy.gguf", m);
    const view = (await translate(path))!;
    const copied: number[] = [];
    const counting = copier && (async (...a: Parameters<typeof copier>) => (copied.push(a[4]), copier(...a)));
    await view.writeTo(join(await dir(), "kernel.gguf"), counting ? { copyRange: counting } : {});
    await view.writeTo(join(await dir(), "memory.gguf"), { copyRange: async () => false });
    await view.close();
    // the 1 MiB tensor goes in one kernel copy (with the untouched tensors lying next to it in the source)
    if (copier !== undefined) expect(Math.max(...copied)).toBeGreaterThanOrEqual(1024 * 1024);
    expect((await readFile(join(await dir(), "kernel.gguf"))).equals(await readFile(join(await dir(), "memory.gguf")))).toBe(true);
  });

  it("serves any byte range of the file it writes, and writes atomically", async () => {
    const { path, bytes: srcBytes } = await writeOnDisk(await dir(), "gemma3-ollama.gguf", ollamaGemma3());
    const view = (await translate(path))!;
    const outPath = join(await dir(), "gemma3-out.gguf");
    await view.writeTo(outPath);
    const written = new Uint8Array(await readFile(outPath));
    expect(written.length).toBe(view.size);
    expect((await readdir(await dir())).filter((f) => f.includes(".tmp"))).toEqual([]);
    await fc.assert(
      fc.asyncProperty(fc.nat(written.length + 64), fc.nat(4096), async (offset, length) => {
        const got = await view.read(offset, length);
        expect(Buffer.from(got).equals(Buffer.from(written.subarray(offset, offset + length)))).toBe(true);
      }),
      { numRuns: 200 },
    );
    // the output parses, and the source file is byte-for-byte unchanged
    const reread = await readGguf(outPath);
    expect(reread.tensors.map((t) => t.name)).toEqual(["token_embd.weight", "output_norm.weight"]);
    expect(Buffer.from(await readFile(path)).equals(Buffer.from(srcBytes))).toBe(true);
    await reread.close();
    await view.source.close();
  });

  it("computes op tensors from source ranges captured before renames, one at a time", async () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "toy");
    addF32(m, "a", [4], 10);
    addF32(m, "b", [4], 20);
    const { model } = await onDisk(await dir(), "toy.gguf", m);
    let calls = 0;
    const handler: Handler = {
      name: "toy",
      arch: "toy",
      detect: () => ["toy"],
      apply(t: Translation) {
        t.op("ab", {
          label: "concat a+b",
          inputs: ["a", "b"],
          type: GgmlType.F32,
          shape: [4, 2],
          compute: (ins) => {
            calls++;
            const out = new Uint8Array(32);
            out.set(ins[0]!.bytes, 0);
            out.set(ins[1]!.bytes, 16);
            return out;
          },
        });
        t.renameTensor("a", "a.renamed"); // the op still reads a's original bytes
        t.dropTensor("b");
      },
    };
    const view = translateModel(model, { handlers: [handler] })!;
    expect(view.model.tensors.map((t) => t.name)).toEqual(["a.renamed", "ab"]);
    const abOffset = view.layout.dataOffset + view.layout.tensorOffsets[1]!;
    const first = new Float32Array((await view.read(abOffset, 32)).slice().buffer);
    expect(Array.from(first)).toEqual([10, 11, 12, 13, 20, 21, 22, 23]);
    await view.read(abOffset + 4, 8); // served from the single-slot cache
    expect(calls).toBe(1);
    expect(view.report.ops).toEqual([{ tensor: "ab", label: "concat a+b", inputs: ["a", "b"] }]);
    expect(view.report.tensors.renamed).toEqual([{ from: "a", to: "a.renamed" }]);
    expect(view.report.tensors.dropped).toEqual(["b"]);
    expect(view.report.tensors.added).toEqual(["ab"]);
    await model.close();
  });

  it("truncates a source range when a reshape shrinks a tensor (the loader reads a prefix)", async () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "toy");
    addF32(m, "emb", [4, 6], 0);
    const { model } = await onDisk(await dir(), "toy2.gguf", m);
    const handler: Handler = { name: "toy", arch: "toy", detect: () => ["toy"], apply: (t) => t.reshape("emb", [4, 5]) };
    const view = translateModel(model, { handlers: [handler] })!;
    const t = view.model.tensor("emb");
    expect(t.data.kind === "range" && t.data.length).toBe(80);
    const grow: Handler = { name: "toy", arch: "toy", detect: () => ["toy"], apply: (t) => t.reshape("emb", [4, 7]) };
    expect(() => translateModel(model, { handlers: [grow] })).toThrow(/needs 112 bytes/);
    await model.close();
  });
});

describe("Translation.fix and the profiles", () => {
  /** A toy handler with one reference step and one fix. */
  const toy: Handler = {
    name: "toy",
    arch: "toy",
    detect: (m) => (m.has("toy.ollama") ? ["kv toy.ollama"] : null),
    apply(t) {
      t.injectU32("toy.block_count", 1);
      t.fix({
        name: "toy-flag",
        reason: "the reference leaves toy.flag unset, which the toy loader reads as true",
        needed: () => !t.draft.has("toy.flag"),
        apply: () => t.setBool("toy.flag", false),
      });
    },
  };
  const toyFile = () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "toy");
    m.setBool("toy.ollama", true);
    addF32(m, "token_embd.weight", [4, 4]);
    return m;
  };

  it("native applies the fix and lists it; reference keeps the gap and lists it as kept", () => {
    const native = translateModel(toyFile(), { handlers: [toy] })!;
    expect(native.report.profile).toBe("native");
    expect(native.model.getBool("toy.flag")).toBe(false);
    expect(native.report.fixes).toEqual([{ handler: "toy", name: "toy-flag", reason: expect.stringContaining("toy.flag") }]);
    expect(native.report.gapsKept).toEqual([]);
    expect(native.report.kv.added).toEqual(["toy.block_count", "toy.flag"]);
    const reference = translateModel(toyFile(), { handlers: [toy], profile: "reference" })!;
    expect(reference.model.has("toy.flag")).toBe(false);
    expect(reference.report.fixes).toEqual([]);
    expect(reference.report.gapsKept).toEqual(native.report.fixes);
    expect(reference.report.kv.added).toEqual(["toy.block_count"]);
  });

  it("a fix no longer needed is neither applied nor listed, so the fixed file is a no-op", () => {
    const fixed = toyFile();
    fixed.setU32("toy.block_count", 1);
    fixed.setBool("toy.flag", false);
    expect(translateModel(fixed, { handlers: [toy] })).toBeNull();
    expect(translateModel(fixed, { handlers: [toy], profile: "reference" })).toBeNull();
  });

  it("detectGaps/applyFixes: only the fixes run on a file detect passes over, and only under native", () => {
    const gapOnly: Handler = {
      ...toy,
      detect: () => null,
      detectGaps: (m) => (m.has("toy.ollama") && !m.has("toy.flag") ? ["kv toy.ollama without toy.flag"] : null),
      applyFixes(t) {
        t.fix({ name: "toy-flag", reason: "as above", needed: () => !t.draft.has("toy.flag"), apply: () => t.setBool("toy.flag", false) });
      },
    };
    const view = translateModel(toyFile(), { handlers: [gapOnly] })!;
    expect(view.report.handlers).toEqual([{ name: "toy", markers: ["kv toy.ollama without toy.flag"] }]);
    expect(view.report.kv).toEqual({ added: ["toy.flag"], changed: [], removed: [] });
    expect(translateModel(toyFile(), { handlers: [gapOnly], profile: "reference" })).toBeNull();
  });
});


describe("work grows linearly with the number of tensors", () => {
  /** Map operations during one translation that renames, reshapes and drops a share of n tensors. */
  function nameReads(n: number): number {
    const m = GgufModel.create();
    m.setString("general.architecture", "toy");
    for (let i = 0; i < n; i++) m.addTensor({ name: `blk.${i}.w`, type: GgmlType.F32, shape: [1], data: { kind: "bytes", bytes: new Uint8Array(4) } });
    const handler: Handler = {
      name: "toy",
      arch: "toy",
      detect: () => ["toy"],
      apply: (t) => {
        for (let i = 0; i < n; i += 4) t.renameTensor(`blk.${i}.w`, `blk.${i}.renamed`);
        for (let i = 1; i < n; i += 4) t.reshape(`blk.${i}.w`, [1]);
        for (let i = 2; i < n; i += 16) t.dropTensor(`blk.${i}.w`);
        t.hide("blk.3.");
      },
    };
    // Map reads and writes: an index rebuilt per operation or a lookup by linear search shows here
    let ops = 0;
    const { get, set } = Map.prototype;
    Map.prototype.get = function (this: Map<unknown, unknown>, k: unknown) {
      ops++;
      return get.call(this, k);
    };
    Map.prototype.set = function (this: Map<unknown, unknown>, k: unknown, v: unknown) {
      ops++;
      return set.call(this, k, v);
    };
    try {
      expect(translateModel(m, { handlers: [handler] })).not.toBeNull();
    } finally {
      Map.prototype.get = get;
      Map.prototype.set = set;
    }
    return ops;
  }

  it("doubling the tensors at most doubles the map operations (no per-operation index rebuilds)", () => {
    const small = nameReads(4000);
    const big = nameReads(8000);
    expect(big / small).toBeLessThan(2.2);
  });
});
