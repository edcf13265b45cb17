// The README's opening example must run as written (against the sources).
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const pkg = fileURLToPath(new URL("..", import.meta.url));

it("the README example runs and prints the value and the backend", async () => {
  const readme = await readFile(join(pkg, "README.md"), "utf8");
  expect(readme).toContain("npm install @compat/tensor-ops");
  const example = /```ts\n([\s\S]*?)```/.exec(readme)?.[1] ?? "";
  const dir = await mkdtemp(join(tmpdir(), "tensor-ops-readme-"));
  try {
    const script = join(dir, "example.mts");
    const sources = example
      .replace('"@compat/tensor-ops"', JSON.stringify(join(pkg, "src/index.ts")))
      .replace('"@compat/gguf"', JSON.stringify(join(pkg, "../gguf/src/index.ts")));
    await writeFile(script, sources);
    const tsx = join(pkg, "../../node_modules/.bin/tsx");
    const out = execFileSync(tsx, [script], { cwd: dir, encoding: "utf8" }).trim().split("\n");
    expect(out[0]).toMatch(/^5 (native|wasm|js)$/);
    expect(out[1]).toBe("[ 4, 8 ]");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
