import { join } from "node:path";
import { GgmlType, readGguf } from "@compat/gguf";
import { killAllSpawned, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { greyImage, mtmdAnswer, proveClip, valuesF32 } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("mistral3 clip handler (Pixtral tower and patch-merger projector inline)", () => {
  it.each(["small-3.1", "ministral3"])("%s: our mmproj equals llama.cpp's native pixtral mmproj, and llama-mtmd-cli answers with our pair as with the native pair", async (variant) => {
    const d = join(await dir(), variant);
    const p = await proveClip(d, "mistral3", {
      seed: 5,
      variant,
      // the [IMG_BREAK] row comes from Ollama's F16 token_embd; llama.cpp's converter took it from the checkpoint
      twin: { roundedThrough: { "v.token_embd.img_break": GgmlType.F16 } },
    });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["mistral3-clip"]);
    const m = p.mmproj;
    expect(m.getString("clip.projector_type")).toBe("pixtral");
    expect(m.getBool("clip.use_silu")).toBe(true);
    // kept F16 as llama.cpp's converter writes it (the reference promotes it to F32)
    expect(m.findTensor("v.patch_embd.weight")?.type).toBe(GgmlType.F16);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    // Q/K element by element against an independent computation from the Ollama file's values:
    // output row r of head h takes input row h*hd + (r%2)*(hd/2) + floor((r%hd)/2).
    const source = await readGguf(p.ollamaPath);
    const nHead = p.native.meta.hparams.v_n_head as number;
    for (const name of ["v.blk.0.attn_q.weight", "v.blk.0.attn_k.weight", "v.blk.1.attn_q.weight", "v.blk.1.attn_k.weight"]) {
      const src = await valuesF32(source, name);
      const shape = source.findTensor(name)!.shape;
      const [cols, rows] = [shape[0]!, shape[1]!];
      const hd = rows / nHead;
      const want = new Float32Array(src.length);
      for (let r = 0; r < rows; r++) {
        const from = Math.floor(r / hd) * hd + (r % 2) * (hd / 2) + Math.floor((r % hd) / 2);
        for (let c = 0; c < cols; c++) want[r * cols + c] = src[from * cols + c]!;
      }
      expect(Array.from(await valuesF32(m, name)), name).toEqual(Array.from(want));
      expect(Array.from(await valuesF32(p.native.mmproj!, name)), `${name} (native)`).toEqual(Array.from(want));
    }
    await source.close();
    await m.close();

    // Our pair (translated text + our mmproj) answers as the native pair does; the text twin has
    // no differences and the mmproj differs only by the F16 rounding of one row.
    const native = await writeFixture(p.native, d);
    const answers: string[] = [];
    for (const level of [128, 30]) {
      const image = await greyImage(d, 16, level);
      const ours = await mtmdAnswer(p.textPath, p.mmprojPath, image, "mistral-v7");
      expect(ours).toBe(await mtmdAnswer(native.text, native.mmproj!, image, "mistral-v7"));
      answers.push(ours);
    }
    // the image reaches the model: two grey levels, two answers
    expect(answers[0]).not.toBe(answers[1]);
  });
});
