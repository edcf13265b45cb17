// The README's opening example must run as written (against the sources).
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { readGguf } from "@compat/gguf";
import { generateFixture, writeFixture } from "@compat/testkit";
import { expect, it } from "vitest";

const pkg = fileURLToPath(new URL("..", import.meta.url));
const root = join(pkg, "../..");

it("the README example runs: a vision blob gives an mmproj, a text-only blob gives none", async () => {
  const readme = await readFile(join(pkg, "README.md"), "utf8");
  const example = /```ts\n([\s\S]*?)```/.exec(readme)![1]!;
  expect(example.trim().split("\n")).toHaveLength(5);
  const dir = await mkdtemp(join(tmpdir(), "clip-readme-"));
  try {
    const vision = (await writeFixture(generateFixture("gemma3", { seed: 2, layout: "ollama", variant: "4b-vision" }), dir)).text;
    const textOnly = (await writeFixture(generateFixture("gemma3", { seed: 2, layout: "ollama", variant: "1b" }), dir)).text;
    const script = join(dir, "example.mts");
    await writeFile(script, example);
    const tsx = join(root, "node_modules/.bin/tsx");
    // tsconfig paths map @compat/* to the sources
    const env = { ...process.env, TSX_TSCONFIG_PATH: join(root, "tsconfig.base.json") };
    const run = (blob: string) => execFileSync(tsx, [script, blob], { cwd: dir, encoding: "utf8", env });
    expect(run(textOnly)).toContain("no vision/audio projector");
    run(vision);
    const mmproj = await readGguf(join(dir, "mmproj-model.gguf"));
    expect(mmproj.getString("clip.projector_type")).toBe("gemma3");
    await mmproj.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
