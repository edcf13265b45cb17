import { killAllSpawned } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { expectAnswersLikeNative, greyImage, proveClip } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("llama4 clip handler (vision tower, pixel-shuffle adapter and projector inline)", () => {
  it("our mmproj equals llama.cpp's native mmproj bit for bit in every value, and llama-mtmd-cli runs it", async () => {
    const d = await dir();
    const p = await proveClip(d, "llama4", { seed: 9 });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["llama4-clip"]);
    const m = p.mmproj;
    expect(m.getString("clip.projector_type")).toBe("llama4");
    expect(m.getNumber("clip.vision.projector.scale_factor")).toBe(2);
    expect(m.findTensor("v.position_embd.weight")?.shape).toEqual([32, 17]);
    expect(m.tensors.every((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(true);
    expect(p.view.report.ops).toEqual([]);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    await m.close();

    const image = await greyImage(d, 32, 128);
    await expectAnswersLikeNative(p, d, image, "llama4");
  });
});
