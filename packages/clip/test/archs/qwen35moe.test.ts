import { killAllSpawned } from "@compat/testkit";
import { afterAll, describe, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { proveQwen35Clip } from "../qwen35-clip";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("qwen35moe clip handler (Qwen3.5 MoE: a Qwen3-VL tower without DeepStack inline)", () => {
  it("our mmproj equals llama.cpp's native qwen3vl_merger mmproj, and llama-mtmd-cli answers an image prompt with our pair", async () => {
    await proveQwen35Clip(await dir(), "qwen35moe", "35b-a3b", 5);
  });

  it("the Q8_0 file (tower left F16 by Ollama's quantizer) gives the same mmproj, which runs with our Q8_0 text GGUF", async () => {
    await proveQwen35Clip(await dir(), "qwen35moe", "35b-a3b-q8_0", 6);
  });
});
