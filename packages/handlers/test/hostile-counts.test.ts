// Counts in a hostile header must not drive the handlers' loops: found by `npm run fuzz`
// (seed 1, input 167140: gemma4/moe-mixed with gemma4.block_count = 2^31 hung in the
// per-block loop). A per-block loop now visits the blocks that have tensors.
import { serializeGguf, parseGguf } from "@compat/gguf";
import { translateModel } from "@compat/handlers";
import { generateFixture } from "@compat/testkit";
import { describe, expect, it } from "vitest";

const tensorsOf = (view: ReturnType<typeof translateModel>) => view!.model.tensors.map((t) => `${t.name} ${t.type} ${t.shape.join("x")}`);

describe("a block count of 2^31 or 2^32-1", () => {
  for (const variant of ["moe-mixed", "moe-fused", "moe-sidecars"]) {
    it(`gemma4 ${variant}: translates at once, exactly as with the real count`, async () => {
      const f = generateFixture("gemma4", { seed: 1, layout: "ollama", variant });
      const bytes = await serializeGguf(f.text);
      const real = translateModel(parseGguf(bytes, "real.gguf", { fileSize: bytes.length }));
      for (const huge of [2 ** 31, 2 ** 32 - 1]) {
        const m = parseGguf(bytes, "hostile.gguf", { fileSize: bytes.length });
        m.setU32("gemma4.block_count", huge);
        const view = translateModel(m);
        expect(tensorsOf(view)).toEqual(tensorsOf(real));
      }
    });
  }
});
