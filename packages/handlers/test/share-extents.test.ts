// Translated files keep each untouched source range at its offset within a 4096-byte block
// (a padding key in the header), so filesystems that share extents (XFS, Btrfs) reflink the
// tensor data instead of copying it; real llama.cpp loads such a file.
import { execFileSync } from "node:child_process";
import { copyFile, mkdtemp, rm, statfs } from "node:fs/promises";
import { join } from "node:path";
import { GgufModel, GgufValueType, PADDING_KEY, SHARE_BLOCK, readGguf } from "@compat/gguf";
import { translate, type TranslatedView } from "@compat/handlers";
import { generateFixture, runLoaderInSubprocess, writeFixture } from "@compat/testkit";
import { kernelRangeCopier } from "@compat/files";
import { nativeFileCopy } from "@compat/tensor-ops";
import { describe, expect, it } from "vitest";
import { addF32, ollamaGemma3Start, tempDir, writeOnDisk } from "./helpers";

const dir = tempDir();

/** Ollama-style gemma3 with inline vision tensors and a few MiB of text weights (a block-odd header). */
function bigOllamaGemma3(): GgufModel {
  const m = ollamaGemma3Start();
  addF32(m, "v.patch_embd.weight", [1024, 3], 3);
  addF32(m, "blk.0.ffn_up.weight", [1024, 1024], 5);
  // removed tensors of whole blocks keep the copied ones in step (the data section has one shift; a range
  // moved by a part of a block relative to the others would be copied, not shared)
  addF32(m, "mm.mm_input_projection.weight", [1024, 4], 2);
  addF32(m, "blk.0.ffn_down.weight", [1024, 512], 6);
  addF32(m, "output_norm.weight", [8], 4);
  return m;
}

/** Every untouched range of at least a block sits at the same offset within a block in source and output. */
function expectBlockOffsetsKept(view: TranslatedView): number {
  const { dataOffset, tensorOffsets } = view.layout;
  let kept = 0;
  view.model.tensors.forEach((t, i) => {
    const d = t.data;
    if (d.kind !== "range" || d.length < SHARE_BLOCK) return;
    expect((dataOffset + tensorOffsets[i]!) % SHARE_BLOCK, t.name).toBe(d.offset % SHARE_BLOCK);
    kept += d.length;
  });
  return kept;
}

describe("translated files keep the source's block offsets (shared extents)", () => {
  it("pads the header with the padding key, and real llama.cpp loads the padded gemma3 output", async () => {
    const d = await dir();
    const ollama = await writeFixture(generateFixture("gemma3", { seed: 5, variant: "1b", layout: "ollama" }), d);
    const view = (await translate(ollama.text))!;
    expect(expectBlockOffsetsKept(view)).toBeGreaterThan(0);
    const out = join(d, "gemma3-1b-padded.gguf");
    await view.writeTo(out);
    await view.close();
    const written = await readGguf(out);
    try {
      expect(written.getArray(PADDING_KEY).itemType).toBe(GgufValueType.UINT8);
    } finally {
      await written.close();
    }
    const load = await runLoaderInSubprocess(out, { maxTokens: 4 });
    expect(load.ok ? load.tokens.length : load.error).toBeGreaterThan(0);
    expect(await translate(out), "the padded output is not translated again").toBeNull();
  });

  it("keeps block offsets with tensors removed around the copied ones", async () => {
    const { path } = await writeOnDisk(await dir(), "gemma3-big.gguf", bigOllamaGemma3());
    const view = (await translate(path))!;
    expect(expectBlockOffsetsKept(view)).toBe((1024 * 1024 + 1024 * 512) * 4);
    await view.close();
  });
});

// A reflink-capable mount (XFS with reflink, Btrfs), e.g. a loop-mounted image: set COMPAT_REFLINK_DIR to it.
const reflinkDir = process.env.COMPAT_REFLINK_DIR;
describe.skipIf(reflinkDir === undefined || nativeFileCopy() === undefined)("on a reflink filesystem (COMPAT_REFLINK_DIR)", () => {
  it("the translated file shares the source's extents: free space drops by the header, not the data", async () => {
    const d = await mkdtemp(join(reflinkDir!, "compat-share-"));
    try {
      const { path: made } = await writeOnDisk(await dir(), "gemma3-big.gguf", bigOllamaGemma3());
      const src = join(d, "src.gguf");
      await copyFile(made, src); // across filesystems: a real copy onto the reflink mount
      const view = (await translate(src))!;
      const before = await statfs(d);
      const out = join(d, "out.gguf");
      await view.writeTo(out);
      await view.close();
      const after = await statfs(d);
      const used = (before.bfree - after.bfree) * before.bsize;
      expect(view.size).toBeGreaterThan(6 * 1024 * 1024);
      expect(used, `${used} bytes of new blocks for a ${view.size}-byte file`).toBeLessThan(256 * 1024);
      try {
        expect(execFileSync("filefrag", ["-v", out], { encoding: "utf8" })).toMatch(/shared/);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e; // no filefrag: statfs said enough
      }
    } finally {
      await rm(d, { recursive: true, force: true });
    }
  });
});
