import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { copyFile, mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Browser } from "playwright-core";
import { launchChromium } from "./browser";
import { readGguf } from "@compat/gguf";
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
  if (!["gguf", "tensor-ops", "handlers"].every((p) => existsSync(join(root, "packages", p, "dist/browser/index.js")) || existsSync(join(root, "packages", p, "dist/index.js")))) {
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
  await new Promise((r) => server?.close(r));
  await rm(dir, { recursive: true, force: true });
});

async function showFile(path: string): Promise<string> {
  const page = await browser.newPage();
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url);
  await page.setInputFiles("#file", path);
  await page.waitForSelector("#out h2:nth-of-type(2)");
  const text = await page.locator("#out").innerText();
  await page.close();
  expect(errors).toEqual([]);
  return text;
}

describe("examples/web in Chromium: a GGUF read in the browser, no upload", () => {
  it("an Ollama-format file: architecture, tensor count, and what a translation would change", async () => {
    const path = (await writeFixture(generateFixture("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }), dir)).text;
    const model = await readGguf(path);
    const tensorCount = model.tensors.length;
    await model.close();
    const text = await showFile(path);
    expect(text).toMatch(/architecture\s+gemma3/);
    expect(text).toContain(`tensors\t${tensorCount}`);
    expect(text).toMatch(/Ollama-format file: gemma3 would translate it/);
    expect(text).toMatch(/tensors hidden\s+[1-9]/);
  });

  it("a llama.cpp-native file: nothing to do", async () => {
    const path = (await writeFixture(generateFixture("llama", { seed: 3, layout: "native" }), dir)).text;
    const text = await showFile(path);
    expect(text).toMatch(/architecture\s+llama/);
    expect(text).toContain("Nothing to do: llama.cpp loads this file as it is.");
  });
});
