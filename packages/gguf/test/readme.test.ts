// The README's opening example must run as written (against the sources).
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { GgmlType, GgufModel, readGguf, serializeGguf } from "@compat/gguf";

const pkg = fileURLToPath(new URL("..", import.meta.url));

it("the README example runs", async () => {
  const readme = await readFile(join(pkg, "README.md"), "utf8");
  const example = /```ts\n([\s\S]*?)```/.exec(readme)![1]!;
  expect(example.trim().split("\n")).toHaveLength(5);
  const dir = await mkdtemp(join(tmpdir(), "gguf-readme-"));
  try {
    const m = GgufModel.create();
    m.setString("general.architecture", "llama");
    m.setString("general.name", "before");
    m.addTensor({ name: "t", type: GgmlType.F32, shape: [8], data: { kind: "bytes", bytes: new Uint8Array(32).fill(7) } });
    await writeFile(join(dir, "model.gguf"), await serializeGguf(m));
    const script = join(dir, "example.mts");
    await writeFile(script, example.replace('"@compat/gguf"', JSON.stringify(join(pkg, "src/index.ts"))));
    const tsx = join(pkg, "../../node_modules/.bin/tsx");
    const out = execFileSync(tsx, [script], { cwd: dir, encoding: "utf8" });
    expect(out).toContain("architecture: 'llama'");
    const renamed = await readGguf(new Uint8Array(await readFile(join(dir, "renamed.gguf"))));
    expect(renamed.getString("general.name")).toBe("renamed");
    expect(renamed.keys()).toEqual(m.keys());
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
