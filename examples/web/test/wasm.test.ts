// @compat/tensor-ops' browser build in real Chromium: the WASM SIMD kernels load from the bundle
// (no fetch, no addon), report themselves as the backend, and convert bit for bit like the JS kernels.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import type { Browser } from "playwright-core";
import { launchChromium } from "./browser";
import { GgmlType as T } from "@compat/gguf";
import { setBackend, toF32 } from "@compat/tensor-ops";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const here = fileURLToPath(new URL("..", import.meta.url));
const root = join(here, "../..");

// Runs in the page: converts every F16 and BF16 pattern and some Q8_0/MXFP4 blocks with the WASM
// tier, then with JS forced, and reports the backends and the output bytes (hex) of each.
const PAGE_ENTRY = `
import { GgmlType as T } from "@compat/gguf";
import { activeBackend, ready, setBackend, toF32 } from "@compat/tensor-ops";
const hex = (f) => Array.from(new Uint8Array(f.buffer), (b) => b.toString(16).padStart(2, "0")).join("");
const all = new Uint8Array(new Uint16Array(Array.from({ length: 65536 }, (_, i) => i)).buffer);
const blocks = (n, size) => Uint8Array.from({ length: n * size }, (_, i) => (i * 73 + 11) & 0xff);
const cases = [[T.F16, all, 65536], [T.BF16, all, 65536], [T.Q8_0, blocks(64, 34), 2048], [T.MXFP4, blocks(64, 17), 2048]];
const run = () => cases.map(([type, bytes, n]) => hex(toF32(type, bytes, n)));
window.result = ready().then((initial) => {
  const wasm = run();
  const active = activeBackend();
  const forced = setBackend("js");
  const js = run();
  return { initial, active, forced, wasm, js };
});
`;

let server: Server;
let url: string;
let browser: Browser;
let appJs = "";

beforeAll(async () => {
  if (!existsSync(join(root, "packages/tensor-ops/dist/browser/index.js"))) {
    execFileSync("npm", ["run", "build", "--workspace", "@compat/tensor-ops"], { cwd: root, stdio: "ignore" });
  }
  const out = await build({
    stdin: { contents: PAGE_ENTRY, resolveDir: here, loader: "js" },
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    conditions: ["browser"],
    tsconfigRaw: "{}",
    logLevel: "warning",
  });
  appJs = out.outputFiles[0]?.text ?? "";
  server = createServer((req, res) => {
    if (req.url === "/") return void res.writeHead(200, { "content-type": "text/html" }).end('<!doctype html><script type="module" src="/app.js"></script>');
    if (req.url === "/app.js") return void res.writeHead(200, { "content-type": "text/javascript" }).end(appJs);
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  // a beforeAll that failed before the server started leaves none: resolve, never wait for ever
  if (server) await new Promise((r) => server.close(r));
});

const sha = (hex: string) => createHash("sha256").update(hex).digest("hex");

describe("@compat/tensor-ops in Chromium (browser build)", () => {
  it("uses the WASM SIMD kernels and matches the JS kernels (and Node) bit for bit", async () => {
    expect(appJs).not.toMatch(/node-gyp-build|node:fs/);
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(url);
    const result = (await page.evaluate("window.result")) as { initial: string; active: string; forced: string; wasm: string[]; js: string[] };
    await page.close();
    expect(errors).toEqual([]);
    expect([result.initial, result.active, result.forced]).toEqual(["wasm", "wasm", "js"]);
    expect(result.wasm.map(sha)).toEqual(result.js.map(sha));
    // Node's JS kernels give the same bytes as the page.
    setBackend("js");
    const all = new Uint8Array(new Uint16Array(Array.from({ length: 65536 }, (_, i) => i)).buffer);
    const hex = (f: Float32Array) => Buffer.from(f.buffer).toString("hex");
    expect(sha(hex(toF32(T.F16, all, 65536)))).toBe(sha(result.wasm[0] as string));
    expect(sha(hex(toF32(T.BF16, all, 65536)))).toBe(sha(result.wasm[1] as string));
    setBackend("auto");
  });
});
