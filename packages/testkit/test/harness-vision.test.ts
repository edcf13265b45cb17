import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findLlamaTools, generateFixtureFiles, killAllSpawned, runMtmdCli, serverCompletion, startLlamaServer } from "@compat/testkit";

// The success path of the vision helpers, on the fixture generator's native
// gemma3 4b-vision pair (text GGUF + separate clip mmproj).
let dir: string;
let text: string;
let mmproj: string;
let image: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "testkit-vision-"));
  const files = await generateFixtureFiles("gemma3", { seed: 1, layout: "native", variant: "4b-vision" }, dir);
  if (!files.mmproj) throw new Error("gemma3 4b-vision native fixture has no mmproj");
  text = files.text;
  mmproj = files.mmproj;
  image = join(dir, "red-pixel.ppm"); // a 1x1 binary PPM; llama.cpp's image loader reads PNM
  await writeFile(image, Buffer.concat([Buffer.from("P6\n1 1\n255\n"), Buffer.from([255, 0, 0])]));
  await findLlamaTools();
});
afterAll(async () => {
  killAllSpawned();
  await rm(dir, { recursive: true, force: true });
});

describe("vision helpers with a real mmproj", () => {
  it("llama-mtmd-cli encodes an image and generates", async () => {
    const run = await runMtmdCli({ model: text, mmproj, image, prompt: "Describe the image." });
    expect(run.ok, run.stderr).toBe(true);
    expect(run.stderr).toMatch(/encoding mtmd batch/);
  });

  it("llama-server starts with --mmproj, is healthy and completes", async () => {
    const server = await startLlamaServer({ model: text, mmproj });
    try {
      const { tokens } = await serverCompletion(server, { prompt: "Hello", nPredict: 3 });
      expect(tokens).toHaveLength(3);
    } finally {
      await server.stop();
    }
  });
});
