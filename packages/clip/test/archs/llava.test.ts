import { join } from "node:path";
import { GgufValueType, readGguf } from "@compat/gguf";
import { clipView, clipViewModel, hasClipHandler } from "@compat/clip";
import { generateFixture, killAllSpawned, runMtmdCli, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { onDisk, tempDir } from "../../../handlers/test/helpers";
import { llavaProjector } from "../llava-fixture";
import { greyImage, mtmdAnswer } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("LLaVA / BakLLaVA projector default (separate clip blob without a projector type)", () => {
  it("names the mlp projector and changes nothing else; stock llama-mtmd-cli rejects the blob and runs ours", async () => {
    const d = await dir();
    const src = await onDisk(d, "llava-projector.gguf", llavaProjector());
    expect(hasClipHandler(src.model)).toBe(true);
    const view = (await clipView(src.path))!;
    expect(view.report.handlers.map((h) => h.name)).toEqual(["llava-projector-type"]);
    expect(view.report.kv).toEqual({ added: ["clip.projector_type"], changed: [], removed: [] });
    expect(view.report.tensors).toEqual({ renamed: [], retyped: [], reshaped: [], hidden: [], dropped: [], added: [] });
    const out = join(d, "mmproj-llava-translated.gguf");
    await view.writeTo(out);
    await view.close();
    const translated = await readGguf(out);
    expect(translated.getString("clip.projector_type")).toBe("mlp");
    expect(translated.tensors.map((t) => t.name)).toEqual(src.model.tensors.map((t) => t.name));
    await translated.close();
    await src.model.close();
    expect(await clipView(out), "idempotent").toBeNull();

    const text = await writeFixture(generateFixture("llama", { seed: 3, layout: "native" }), join(d, "text"));
    const image = await greyImage(d, 32, 90);
    const stock = await runMtmdCli({ model: text.text, mmproj: src.path, image, prompt: "Describe.", args: ["--chat-template", "llama3"] });
    expect(stock.ok).toBe(false);
    expect(stock.stderr).toMatch(/unknown projector type/);
    expect((await mtmdAnswer(text.text, out, image, "llama3")).length).toBeGreaterThan(0);
  });

  it("leaves projectors alone that name their type, that have no vision encoder, or when compat is off", () => {
    const typed = llavaProjector((m) => m.setString("clip.projector_type", "ldp"));
    const visionTyped = llavaProjector((m) => m.setString("clip.vision.projector_type", "mlp"));
    const noVision = llavaProjector((m) => m.setBool("clip.has_vision_encoder", false));
    const u8Vision = llavaProjector((m) => m.set("clip.has_vision_encoder", GgufValueType.UINT8, 1));
    for (const m of [typed, visionTyped, noVision, u8Vision]) {
      expect(clipViewModel(m)).toBeNull();
      expect(hasClipHandler(m)).toBe(false);
    }
    expect(clipViewModel(llavaProjector(), { env: { OLLAMA_LLAMA_CPP_COMPAT: "0" } })).toBeNull();
  });
});
