// The ops' native code is loaded when a model is mounted (its header parse walks the vocabulary
// with it; a model with computed tensors loads it regardless), not by the first read of a
// computed tensor (which would wait for it). Each case runs in a process of its own
// (store-mount-child.ts): this one loaded that code long ago.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { buildOllamaStore } from "@compat/store";
import { tempDirs } from "./helpers";

const temp = tempDirs();
const script = fileURLToPath(new URL("./store-mount-child.ts", import.meta.url));
const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

async function gemma3Store(variant: "1b" | "4b-vision"): Promise<string> {
  const root = await temp();
  const fx = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant }, await temp());
  await buildOllamaStore(root, [{ name: `gemma3:${variant}`, model: fx.text }]);
  return root;
}

function mountIn(root: string, dir: string, env: NodeJS.ProcessEnv = process.env): Promise<{ before: boolean; mounted: boolean; files: string[] }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", tsx, script, root, dir], { stdio: ["ignore", "pipe", "pipe"], env });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`store-mount-child exited ${code}: ${err}`))));
  });
}

describe("StoreMount loads the ops' native code", () => {
  it("once a model with computed tensors is mounted (gemma3 vision), before any of its files is read", async () => {
    const r = await mountIn(await gemma3Store("4b-vision"), await temp());
    expect(r).toEqual({ before: false, mounted: true, files: ["gemma3:4b-vision"] });
  });

  it("for a store whose models compute nothing as well: the header parse walks the vocabulary with it (gemma3 1b)", async () => {
    const r = await mountIn(await gemma3Store("1b"), await temp());
    expect(r).toEqual({ before: false, mounted: true, files: ["gemma3:1b"] });
  });

  it("never where COMPAT_TENSOR_OPS=js rules it out (the walk and the fills in JavaScript)", async () => {
    const r = await mountIn(await gemma3Store("4b-vision"), await temp(), { ...process.env, COMPAT_TENSOR_OPS: "js" });
    expect(r).toEqual({ before: false, mounted: false, files: ["gemma3:4b-vision"] });
  });
});
