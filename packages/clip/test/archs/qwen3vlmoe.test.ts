import { GgmlType } from "@compat/gguf";
import { killAllSpawned } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { expectAnswersLikeNative, greyImage, proveClip } from "../proof";
import { expectTowerFromSource } from "../qwen-tower";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("qwen3vl clip handler on qwen3vlmoe (Qwen3-VL-30B-A3B-style: the same tower beside an MoE text model)", () => {
  it("our mmproj equals llama.cpp's native qwen3vl_merger mmproj, and llama-mtmd-cli answers an image prompt with our pair", async () => {
    const d = await dir();
    // Ollama stored v.pos_embed F16; llama.cpp's converter keeps it F32: compared through F16
    const p = await proveClip(d, "qwen3vlmoe", { seed: 5, twin: { roundedThrough: { "v.position_embd.weight": GgmlType.F16 } } });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["qwen3vl-clip"]);
    const m = p.mmproj;
    expect(m.getString("clip.projector_type")).toBe("qwen3vl_merger");
    expect(m.getNumber("clip.vision.projection_dim")).toBe(32);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    await expectTowerFromSource(m, p.ollamaPath, 3, 3);
    await m.close();

    const image = await greyImage(d, 96, 170);
    await expectAnswersLikeNative(p, d, image, "chatml");
  });
});
