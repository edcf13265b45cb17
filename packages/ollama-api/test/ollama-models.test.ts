import { join } from "node:path";
import { writeGguf } from "@compat/gguf";
import type { PreparedModel } from "@compat/prepare";
import { generateFixture } from "@compat/testkit";
import { describe, expect, it } from "vitest";
import { apiModel } from "../src/models";
import { tempDirs } from "./helpers";

const tempDir = tempDirs();

describe("apiModel", () => {
  // serve --all lists every model at start: reading each header again then kept the API busy
  it("reads a model's facts from its file when first asked, not when it is listed, and then once", async () => {
    const path = join(await tempDir(), "model.gguf");
    const prepared = {
      resolved: { name: "tiny:latest", modelPath: path, size: 0, params: {}, projectors: [] },
      modelPath: path,
      translated: false,
      cacheHit: false,
      status: "native",
      handlers: [],
      architecture: "llama",
      embedding: false,
      hasChatTemplate: false,
    } as unknown as PreparedModel;
    const m = apiModel("tiny:latest", prepared);
    // the file comes only now: a read when the model was listed would have found none
    await writeGguf(generateFixture("llama", { seed: 1, layout: "native" }).text, path);
    const facts = await m.facts;
    expect(facts.architecture).toBe("llama");
    expect(facts.details.family).toBe("llama");
    expect(m.facts).toBe(m.facts);
  });
});
