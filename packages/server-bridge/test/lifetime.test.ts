// llama-server dies with the process that started it, however that process ends (issue 27,
// item 3): SIGKILL runs no handler of ours, so the kernel does it (setpriv --pdeathsig).
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { tiedToParent } from "@compat/server-bridge";
import { offersPdeathsig } from "../src/child";
import { llamaServerPath, tempDirs } from "./helpers";

const temp = tempDirs();
const script = fileURLToPath(new URL("./serve-child.ts", import.meta.url));
const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

/** Until `pid` is gone (a zombie of a dead parent is reaped by init at once); false after `ms`. */
async function gone(pid: number, ms = 20_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (!existsSync(`/proc/${pid}`)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

describe("a llama.cpp child dies with its parent", () => {
  it("SIGKILL of the process that started llama-server: llama-server is gone too", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const parent = spawn(process.execPath, ["--import", tsx, script, fx.text, await llamaServerPath(), await temp()], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    parent.stdout.on("data", (d) => (out += d));
    parent.stderr.on("data", (d) => (err += d));
    const deadline = Date.now() + 120_000;
    while (!out.includes("\n")) {
      if (parent.exitCode !== null || Date.now() > deadline) throw new Error(`no server: ${err}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const { pid, url } = JSON.parse(out) as { pid: number; url: string };
    expect((await fetch(`${url}/health`)).status).toBe(200);
    // the pid is llama-server itself (setpriv and the shell exec in place)
    expect(existsSync(`/proc/${pid}`)).toBe(true);
    parent.kill("SIGKILL");
    expect(await gone(pid)).toBe(true);
  });

  it("setpriv is asked about --pdeathsig through its file, with no process", () => {
    // the setpriv tiedToParent chose offers the option; a program without it, and no program, do not
    const setpriv = tiedToParent("/bin/true", []).command;
    expect(setpriv).toMatch(/setpriv$/);
    expect(offersPdeathsig(setpriv)).toBe(true);
    expect(offersPdeathsig("/bin/true")).toBe(false);
    expect(offersPdeathsig(join(fileURLToPath(new URL(".", import.meta.url)), "no-such-program"))).toBe(false);
  });

  it("a child whose parent died before the death signal was set never runs the command", async () => {
    const marker = join(await temp(), "ran");
    const run = tiedToParent("/bin/sh", ["-c", `touch ${marker}`]);
    expect(run.command).toMatch(/setpriv$/);
    // as if our pid were another's: the shell sees a parent that is not the one it was started for
    const args = run.args.map((a) => (a === String(process.pid) ? "1" : a));
    const code = await new Promise<number | null>((resolve) => spawn(run.command, args, { stdio: "ignore" }).on("close", resolve));
    expect(code).toBe(125);
    expect(existsSync(marker)).toBe(false);
    // and with the right parent it runs
    const ok = await new Promise<number | null>((resolve) => spawn(run.command, run.args, { stdio: "ignore" }).on("close", resolve));
    expect(ok).toBe(0);
    expect(existsSync(marker)).toBe(true);
  });

  it("an intermediate process killed at once after it spawned: its tied child still dies", async () => {
    // node starts `sleep` tied to itself and is SIGKILLed right away, many times over
    const code = `const { tiedToParent } = await import(${JSON.stringify(pathToFileURL(fileURLToPath(new URL("../src/child.ts", import.meta.url))).href)});
const { spawn } = await import("node:child_process");
const r = tiedToParent("sleep", ["300"]);
const c = spawn(r.command, r.args, { stdio: "ignore" });
process.stdout.write(String(c.pid) + "\\n");`;
    const pids: number[] = [];
    for (let i = 0; i < 5; i++) {
      const p = spawn(process.execPath, ["--import", tsx, "--input-type=module", "-e", code + "\nsetInterval(() => {}, 1000);"], { stdio: ["ignore", "pipe", "inherit"] });
      const pid = await new Promise<number>((resolve) => p.stdout.once("data", (d) => resolve(Number(String(d).trim()))));
      p.kill("SIGKILL");
      pids.push(pid);
    }
    for (const pid of pids) expect(await gone(pid), `sleep ${pid}`).toBe(true);
  });
});
