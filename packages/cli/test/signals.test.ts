import { spawn } from "node:child_process";
import { existsSync, openSync, closeSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateFixture, writeFixture } from "@compat/testkit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bin, collect, exited, tsx, withZeroTensor } from "./helpers";

const node = (args: string[], stdout: "pipe" | number = "pipe") =>
  spawn(process.execPath, ["--import", tsx, bin, ...args], { stdio: ["ignore", stdout, "pipe"] });

let dir: string;
let big: string;
let small: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-cli-signals-"));
  small = (await writeFixture(generateFixture("llama", { seed: 3, layout: "ollama", variant: "llama3-metadata-gap" }), dir)).text;
  // The same Ollama-format file with a 512 MiB tensor appended, written out densely, so a translation takes a while.
  big = await withZeroTensor(small, dir, "big-ollama", 512 * 1024 * 1024, { sparse: false });
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("signals during translate", () => {
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    it(`${signal} mid-write leaves neither the output nor its temp file`, async () => {
      const outDir = await mkdtemp(join(dir, `${signal}-`));
      const out = join(outDir, "out.gguf");
      const child = node(["translate", big, "-o", out]);
      const stderr = collect(child.stderr);
      const done = exited(child);
      // wait until the writer has created its temp file, then interrupt
      const deadline = Date.now() + 30_000;
      while (!(await readdir(outDir)).some((e) => e.endsWith(".tmp"))) {
        if (Date.now() > deadline) throw new Error(`no temp file appeared; stderr: ${stderr()}`);
        await new Promise((r) => setTimeout(r, 5));
      }
      child.kill(signal);
      const { code } = await done;
      expect(code).toBeGreaterThan(128);
      expect(await readdir(outDir)).toEqual([]);
      expect(stderr()).not.toMatch(/\n\s+at /);
    });
  }

  it("after a SIGKILL, the next run removes the dead process's temp file and completes", async () => {
    const outDir = await mkdtemp(join(dir, "kill-"));
    const out = join(outDir, "out.gguf");
    const child = node(["translate", big, "-o", out]);
    const done = exited(child);
    while (!(await readdir(outDir)).some((e) => e.endsWith(".tmp"))) await new Promise((r) => setTimeout(r, 5));
    child.kill("SIGKILL");
    await done;
    expect((await readdir(outDir)).filter((e) => e.endsWith(".tmp"))).toHaveLength(1);
    const again = node(["translate", big, "-o", out]);
    expect((await exited(again)).code).toBe(0);
    expect(await readdir(outDir)).toEqual(["out.gguf"]);
  });
});

describe("standard output that goes away", () => {
  it("a pipe closed early (| head -c 10) ends quietly", async () => {
    const child = node(["inspect", small, "--json"]);
    const stderr = collect(child.stderr);
    const done = exited(child);
    child.stdout!.once("data", () => child.stdout!.destroy());
    const { code } = await done;
    expect(stderr()).toBe("");
    expect(code).toBe(0);
  });

  it("a full device (> /dev/full) is one line on stderr and exit 1", async () => {
    if (!existsSync("/dev/full")) return;
    const fd = openSync("/dev/full", "w");
    try {
      const child = node(["inspect", small], fd);
      const stderr = collect(child.stderr);
      const { code } = await exited(child);
      expect(code).toBe(1);
      expect(stderr().trim().split("\n")).toHaveLength(1);
      expect(stderr()).toMatch(/^ollama-compat: cannot write to standard output: ENOSPC/);
    } finally {
      closeSync(fd);
    }
  });
});
