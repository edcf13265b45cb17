import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { gzipSync } from "node:zlib";
import { build } from "esbuild";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgmlType, GgufModel, serializeGguf } from "@compat/gguf";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
/** Read-only use in a browser must stay small: min+gzip bytes. */
const READ_ONLY_BUDGET = 15 * 1024;

let dir: string;
beforeAll(async () => {
  if (!existsSync(join(pkgDir, "dist/browser/index.js"))) execFileSync("npx", ["tsup"], { cwd: pkgDir, stdio: "ignore" });
  // A project outside the workspace that depends on the package, as a web app would.
  dir = await mkdtemp(join(tmpdir(), "gguf-browser-"));
  await mkdir(join(dir, "node_modules/@compat"), { recursive: true });
  await symlink(pkgDir, join(dir, "node_modules/@compat/gguf"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function bundle(source: string): Promise<string> {
  await writeFile(join(dir, "entry.js"), source);
  const out = join(dir, "out.js");
  await build({ entryPoints: [join(dir, "entry.js")], bundle: true, platform: "browser", format: "esm", minify: true, outfile: out, logLevel: "silent" });
  return readFile(out, "utf8");
}

describe("@compat/gguf in a browser bundle", () => {
  it("bundles for the browser without node built-ins, within the read-only size budget", async () => {
    const code = await bundle(`import { readGguf, summarize } from "@compat/gguf";\nexport const show = async (f) => summarize(await readGguf(f));\n`);
    expect(code).not.toMatch(/node:fs|fs\/promises|node:crypto/);
    const gz = gzipSync(code, { level: 9 }).length;
    expect(gz).toBeLessThan(READ_ONLY_BUDGET);
  });

  it("tree-shakes: the type table alone is a fraction of the reader", async () => {
    const reader = await bundle(`export { readGguf } from "@compat/gguf";\n`);
    const table = await bundle(`export { GgmlType } from "@compat/gguf";\n`);
    expect(table.length).toBeLessThan(reader.length / 4);
  });

  it("the browser build reads a Blob, and refuses a path with a typed error", async () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "llama");
    m.addTensor({ name: "t", type: GgmlType.F32, shape: [4], data: { kind: "bytes", bytes: new Uint8Array(16) } });
    const bytes = await serializeGguf(m);
    const browser = await import(pathToFileURL(join(pkgDir, "dist/browser/index.js")).href);
    const read = await browser.readGguf(new Blob([bytes]));
    expect(read.getString("general.architecture")).toBe("llama");
    expect(read.tensors.map((t: { name: string }) => t.name)).toEqual(["t"]);
    await expect(browser.readGguf("/some/file.gguf")).rejects.toMatchObject({ code: "IO" });
  });
});
