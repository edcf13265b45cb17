import { killAllSpawned } from "@compat/testkit";
import { afterAll, describe, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { proveQwen35Clip, proveQwen35TowerSizes } from "../qwen35-clip";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("qwen35 clip handler (Qwen3.5 dense: a Qwen3-VL tower without DeepStack inline)", () => {
  it("our mmproj equals llama.cpp's native qwen3vl_merger mmproj, and llama-mtmd-cli answers an image prompt with our pair", async () => {
    await proveQwen35Clip(await dir(), "qwen35", "9b", 5);
  });

  it("the Q8_0 file (tower left F16 by Ollama's quantizer) gives the same mmproj, which runs with our Q8_0 text GGUF", async () => {
    await proveQwen35Clip(await dir(), "qwen35", "9b-q8_0", 6);
  });

  it("a tower of other sizes (FFN 96, 24x24 positions): native derives feed_forward_length and image_size as llama.cpp's converter does; reference keeps 4304 / 768", async () => {
    await proveQwen35TowerSizes(await dir(), "qwen35", "9b-small-tower", 7, { ff: 96, imageSize: 384 });
  });
});
