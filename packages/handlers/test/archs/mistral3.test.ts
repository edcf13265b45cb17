import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { generateFixture, killAllSpawned } from "@compat/testkit";
import { tempDir } from "../helpers";
import { expectMtmdEncodesImage, expectTwinTokens, NO_DIFFERENCES, proveHandler, proveNativeTwin } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("mistral3 handler (Mistral Small 3.x as Ollama converted it, Pixtral tower inline)", () => {
  it("hides the vision tower and names the tekken pre-tokenizer; real llama.cpp generates what the native twin generates", async () => {
    const p = await proveHandler(await dir(), "mistral3", { seed: 5, nativeTwin: true });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["mistral3"]);
    const m = p.translatedModel;
    expect(m.getString("tokenizer.ggml.pre")).toBe("tekken");
    expect(m.tensors.some((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(false);
    // the published files carry no rope.scaling.* keys, so there is nothing to copy to the yarn names
    expect(m.get("mistral3.rope.scaling.yarn_beta_fast")).toBeUndefined();
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    expectTwinTokens(p);
  });

  it("ministral3 variant: copies Ollama's YaRN and scaling-beta keys to llama.cpp's names; generates what the native twin generates", async () => {
    const p = await proveHandler(await dir(), "mistral3", { seed: 5, variant: "ministral3", nativeTwin: true });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["mistral3"]);
    const m = p.translatedModel;
    expect(m.getNumber("mistral3.rope.scaling.yarn_beta_fast")).toBe(32);
    expect(m.getNumber("mistral3.rope.scaling.yarn_beta_slow")).toBe(1);
    expect(m.getNumber("mistral3.rope.scaling.yarn_log_multiplier")).toBe(1);
    expect(m.getNumber("mistral3.attention.temperature_scale")).toBeCloseTo(0.1, 7);
    expect(p.diff).toEqual(NO_DIFFERENCES);

    expectTwinTokens(p);
  });

  it("the native twin: translate() leaves it alone, and llama-mtmd-cli runs its pixtral mmproj", async () => {
    const d = join(await dir(), "native-mtmd");
    const { paths: native } = await proveNativeTwin(d, generateFixture("mistral3", { seed: 5, layout: "native" }), { load: false });
    await expectMtmdEncodesImage(native, { side: 16, level: 200 }, "mistral-v7");
  });
});
