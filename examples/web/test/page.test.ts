import { execFile, execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { copyFile, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { createRequire } from "node:module";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { basename, dirname, extname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import type { Browser, Page } from "playwright-core";
import { launchChromium } from "./browser";
import { readGguf } from "@compat/gguf";
import { translate } from "@compat/handlers";
import { clipView } from "@compat/clip";
import { generateFixture, writeFixture } from "@compat/testkit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const here = fileURLToPath(new URL("..", import.meta.url));
const root = join(here, "../..");

let dir: string;
let server: Server;
let url: string;
let browser: Browser;

beforeAll(async () => {
  // The page uses the packages as published (dist/, browser builds): build them if needed.
  if (!["gguf", "tensor-ops", "handlers", "clip"].every((p) => existsSync(join(root, "packages", p, "dist/browser/index.js")) || existsSync(join(root, "packages", p, "dist/index.js")))) {
    execFileSync("npm", ["run", "build"], { cwd: root, stdio: "ignore" });
  }
  dir = await mkdtemp(join(tmpdir(), "compat-web-"));
  execFileSync(process.execPath, [join(here, "build.mjs"), join(dir, "app.js")], { stdio: "inherit" });
  await copyFile(join(here, "index.html"), join(dir, "index.html"));
  const types: Record<string, string> = { ".html": "text/html", ".js": "text/javascript" };
  server = createServer(async (req, res) => {
    const name = req.url === "/" ? "index.html" : (req.url ?? "").slice(1);
    if (!["index.html", "app.js"].includes(name)) return void res.writeHead(404).end();
    res.writeHead(200, { "content-type": types[extname(name)] ?? "application/octet-stream" }).end(await readFile(join(dir, name)));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  // a beforeAll that failed before the server started leaves none: resolve, never wait for ever
  if (server) await new Promise((r) => server.close(r));
  await rm(dir, { recursive: true, force: true });
});

/** The page with `path` given to its file input, once it has shown the command (its last section). */
async function showFile(path: string): Promise<{ page: Page; text: string; errors: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url);
  await page.setInputFiles("#file", path);
  await page.waitForSelector("#command pre");
  return { page, text: await page.locator("#out").innerText(), errors };
}

/** Rows of the metadata diff table under `scope`: [kind, key, before, after]. */
async function diffRows(page: Page, scope: string): Promise<string[][]> {
  return page.locator(`${scope} table.kv-diff tbody tr`).evaluateAll((trs) => trs.map((tr) => [tr.className, ...Array.from((tr as HTMLTableRowElement).cells).slice(1).map((c) => c.textContent ?? "")]));
}

async function listItems(page: Page, selector: string): Promise<string[]> {
  return page.locator(`${selector} li`).allTextContents();
}

/** A qwen3.5 MoE vision blob, as Ollama wrote it: renames, hidden tower tensors, computed tensors, and an mmproj. */
async function visionBlob(): Promise<string> {
  return (await writeFixture(generateFixture("qwen35moe", { seed: 1, layout: "ollama", variant: "35b-a3b" }), dir)).text;
}

describe("examples/web in Chromium: a GGUF read in the browser, no upload", () => {
  it("an Ollama vision blob: what it is, every change to the text GGUF with its values, the mmproj, and the command", async () => {
    const path = await visionBlob();
    const view = (await translate(path))!;
    const mmproj = (await clipView(path))!;
    const r = view.report;
    try {
      const { page, text, errors } = await showFile(path);
      expect(errors).toEqual([]);
      // what it is
      expect(text).toMatch(/architecture\s+qwen35moe/);
      expect(text).toContain(`tensors\t${view.source.tensors.length}`);
      expect(text).toMatch(/Ollama-format file: qwen35moe, qwen35moe-clip would translate it/);

      // the text GGUF: every key added, changed (before and after), removed, with its value
      const rows = await diffRows(page, "#text-diff");
      expect(rows.map((row) => `${row[0]} ${row[1]}`)).toEqual([...r.kv.added.map((k) => `added ${k}`), ...r.kv.changed.map((k) => `changed ${k}`), ...r.kv.removed.map((k) => `removed ${k}`)]);
      expect(r.kv.added.length + r.kv.changed.length).toBeGreaterThan(0);
      for (const [kind, key, before, after] of rows) {
        const was = view.source.get(key!);
        const now = view.model.get(key!);
        if (kind !== "added") expect(before, key).toMatch(new RegExp(`= ${expected(was!.value)}`));
        if (kind !== "removed") expect(after, key).toMatch(new RegExp(`= ${expected(now!.value)}`));
      }
      // tensors renamed (from -> to), hidden, computed (the op and its inputs)
      expect(r.tensors.renamed.length).toBeGreaterThan(0);
      expect(await listItems(page, "#text-diff details.renamed")).toEqual(r.tensors.renamed.map((x) => `${x.from} → ${x.to}`));
      expect(r.tensors.hidden.length).toBeGreaterThan(0);
      expect(await listItems(page, "#text-diff details.hidden")).toEqual(r.tensors.hidden);
      expect(r.ops.length).toBeGreaterThan(0);
      expect(await listItems(page, "#text-diff details.computed")).toEqual(r.ops.map((o) => `${o.tensor} ← ${o.label}(${o.inputs.join(", ")})`));

      // the mmproj: its projector type and its tensors; and the text model's keys it leaves out, with their values
      const m = await page.locator("#mmproj").innerText();
      expect(m).toMatch(/projector type\s+qwen3vl_merger/);
      expect(m).toContain(`tensors\t${mmproj.model.tensors.length}`);
      expect(await page.locator("#mmproj details.mmproj-tensors tbody tr td:first-child").allTextContents()).toEqual(mmproj.model.tensors.map((t) => t.name));
      const projRows = await diffRows(page, "#mmproj");
      const removed = projRows.filter((row) => row[0] === "removed");
      expect(removed.map((row) => row[1])).toEqual(mmproj.report.kv.removed);
      for (const [, key, before] of removed) expect(before, key).toMatch(new RegExp(`= ${expected(mmproj.source.get(key!)!.value)}`));

      // the command: exactly what writes both files and serves them
      const name = basename(path, ".gguf");
      const command = await page.locator("#command pre").innerText();
      expect(command).toBe(`ollama-compat translate ${name}.gguf -o ${name}-llamacpp.gguf\nllama-server -m ${name}-llamacpp.gguf --mmproj mmproj-${name}-llamacpp.gguf`);
      await page.close();
      await runTranslateLine(command.split("\n")[0]!, dirname(path));
      for (const f of [`${name}-llamacpp.gguf`, `mmproj-${name}-llamacpp.gguf`]) expect((await stat(join(dirname(path), f))).size, f).toBeGreaterThan(0);
    } finally {
      await view.close();
      await mmproj.close();
    }
  }, 180_000);

  it("the diff is on screen: its rows are drawn in their colours, with text in them (a screenshot, read back pixel by pixel)", async () => {
    const { page, errors } = await showFile(await visionBlob());
    expect(errors).toEqual([]);
    const diff = page.locator("#text-diff table.kv-diff");
    await diff.scrollIntoViewIfNeeded();
    expect(await diff.isVisible()).toBe(true);
    const box = (await diff.boundingBox())!;
    expect(box.width).toBeGreaterThan(300);
    expect(box.height).toBeGreaterThan(40);
    const png = await diff.screenshot();
    // Chromium decodes its own screenshot; count the pixels of each row colour and of dark text.
    const counts = await page.evaluate(async (b64) => {
      const img = new Image();
      img.src = `data:image/png;base64,${b64}`;
      await img.decode();
      const canvas = Object.assign(document.createElement("canvas"), { width: img.width, height: img.height });
      const ctx = canvas.getContext("2d")!;
      ctx.drawImage(img, 0, 0);
      const px = ctx.getImageData(0, 0, img.width, img.height).data;
      const near = (i: number, [r, g, b]: number[]) => Math.abs(px[i]! - r!) + Math.abs(px[i + 1]! - g!) + Math.abs(px[i + 2]! - b!) < 12;
      const out = { added: 0, changed: 0, dark: 0, total: img.width * img.height };
      for (let i = 0; i < px.length; i += 4) {
        if (near(i, [0xda, 0xfb, 0xe1])) out.added++;
        else if (near(i, [0xff, 0xf1, 0xc2])) out.changed++;
        else if (px[i]! + px[i + 1]! + px[i + 2]! < 200) out.dark++;
      }
      return out;
    }, png.toString("base64"));
    await page.close();
    // added and changed rows fill a visible share of the table, and text is drawn over them
    expect(counts.added / counts.total).toBeGreaterThan(0.05);
    expect(counts.changed / counts.total).toBeGreaterThan(0.02);
    expect(counts.dark / counts.total).toBeGreaterThan(0.01);
  });

  it("an Ollama blob named by its digest: the command names the output after the model (its name, else its architecture)", async () => {
    const fixture = await writeFixture(generateFixture("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }), dir);
    const blob = join(dir, `sha256-${"ab".repeat(32)}`);
    await copyFile(fixture.text, blob);
    const model = await readGguf(blob);
    const tensorCount = model.tensors.length;
    // Ollama's converter writes no general.name
    expect(model.has("general.name")).toBe(false);
    const stem = model.getString("general.architecture");
    await model.close();
    const { page, text, errors } = await showFile(blob);
    expect(errors).toEqual([]);
    expect(text).toContain(`tensors\t${tensorCount}`);
    expect(text).toMatch(/projector type\s+gemma3/);
    expect(await page.locator("#command pre").innerText()).toBe(`ollama-compat translate ${basename(blob)} -o ${stem}.gguf\nllama-server -m ${stem}.gguf --mmproj mmproj-${stem}.gguf`);
    await page.close();
  });

  it("a llama.cpp-native file: nothing to do, and the command serves it as it is", async () => {
    const path = (await writeFixture(generateFixture("llama", { seed: 3, layout: "native" }), dir)).text;
    const { page, text, errors } = await showFile(path);
    expect(errors).toEqual([]);
    expect(text).toMatch(/architecture\s+llama/);
    expect(text).toContain("Nothing to do: llama.cpp loads this file as it is.");
    expect(await page.locator("#text-diff, #mmproj").count()).toBe(0);
    expect(await page.locator("#command pre").innerText()).toBe(`llama-server -m ${basename(path)}`);
    await page.close();
  });
});

/** A metadata value as the page shows it, as a pattern: strings quoted, arrays by their first item. */
function expected(v: unknown): string {
  const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  if (typeof v === "string") return esc(JSON.stringify(v).slice(0, 40));
  if (typeof v === "object" && v !== null) {
    const a = v as { length: number; at(i: number): unknown };
    return a.length === 0 ? "\\[\\]" : `\\[${expected(a.at(0))}`;
  }
  return esc(String(v));
}

const exec = promisify(execFile);
const bin = join(root, "packages/cli/src/bin.ts");
const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

/** Runs the page's `ollama-compat translate …` line in `cwd` with the CLI from source. */
async function runTranslateLine(line: string, cwd: string): Promise<void> {
  const [cmd, ...args] = line.split(" ");
  expect(cmd).toBe("ollama-compat");
  await exec(process.execPath, ["--import", tsx, bin, ...args], { cwd });
}
