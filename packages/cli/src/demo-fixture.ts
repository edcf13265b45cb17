/**
 * The demo's model: @compat/testkit's gemma3 "4b-vision" fixture generator (a tiny
 * Gemma 3 with its SigLIP tower embedded, laid out exactly as Ollama's writer lays out
 * a published blob). The generator's source is bundled into this package's dist at build
 * time (tsup follows the relative import), so `ollama-compat demo` works from an installed
 * tarball, where the unpublished testkit is not there.
 */
import { writeGguf } from "@compat/gguf";
import { generateFixture } from "../../testkit/src/fixtures/generate";

export async function writeDemoModel(path: string): Promise<void> {
  const fixture = generateFixture("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" });
  await writeGguf(fixture.text, path);
}
