/**
 * Build step: writes dist/demo-model.gguf, the model `ollama-compat demo` starts from (the CLI's
 * own file, shipped in its tarball): @compat/testkit's gemma3 "4b-vision" fixture in Ollama's
 * layout, seed 1 — a tiny Gemma 3 with its SigLIP tower in the same file, laid out exactly as
 * Ollama's writer lays out a published blob. The testkit is not published, so the shipped code
 * reads this file and never imports it.
 */
import { writeGguf } from "@compat/gguf";
import { generateFixture } from "@compat/testkit";
import { DEMO_FIXTURE, demoModelPath } from "../src/demo-fixture";

const { arch, ...options } = DEMO_FIXTURE;
await writeGguf(generateFixture(arch, options).text, demoModelPath());
