import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { findLlamaTools, generateFixtureFiles } from "@compat/testkit";
import { planView } from "@compat/mount";
import { tempDirs, viewsOf } from "./helpers";

const t = tempDirs();

describe("llama-server on a mount whose daemon dies", () => {
  it("gets an error while it reads, not wrong data", async () => {
    const dir = await t.dir();
    const src = await generateFixtureFiles("gemma3", { seed: 5, layout: "ollama", variant: "4b-vision" }, join(dir, "src"));
    const { text, mmproj } = await viewsOf(src.text);
    const mount = await t.mount(dir);
    const textPlan = await planView(text!, { sidecarPath: (tn, i) => mount.sidecars.pathFor("text", tn, i) });
    await mount.addFile("m/m.gguf", textPlan.plan, textPlan.computed);
    // the projector's computed tensors wait: llama-server is then blocked in a read of the mount
    let reading!: () => void;
    const blocked = new Promise<void>((r) => (reading = r));
    const mm = await planView(mmproj!, { sidecarPath: (tn, i) => mount.sidecars.pathFor("mmproj", tn, i) });
    const held = mm.computed.map((c) => ({ ...c, produce: () => (reading(), new Promise<Uint8Array>(() => undefined)) }));
    await mount.addFile("m/mmproj-m.gguf", mm.plan, held);

    const { server } = await findLlamaTools();
    const args = ["--model", join(mount.dir, "m/m.gguf"), "--mmproj", join(mount.dir, "m/mmproj-m.gguf"), "--port", "0", "--host", "127.0.0.1", "--threads", "2", "--no-warmup", "-c", "512"];
    const child = spawn(server, args, { stdio: ["ignore", "pipe", "pipe"] });
    let log = "";
    child.stdout.on("data", (d: Buffer) => (log += d));
    child.stderr.on("data", (d: Buffer) => (log += d));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.once("exit", (code, signal) => r({ code, signal })));
    await Promise.race([blocked, exited.then(() => Promise.reject(new Error(`llama-server exited before it read the projector:\n${log}`)))]);
    process.kill(mount.pid, "SIGKILL");
    const exit = await Promise.race([exited, new Promise<"hung">((r) => setTimeout(() => r("hung"), 60_000))]);
    if (exit === "hung") child.kill("SIGKILL");
    expect(exit, log.slice(-2000)).not.toBe("hung");
    // it failed to load (an exit code or a signal), and never served
    expect(exit !== "hung" && (exit.code !== 0 || exit.signal !== null), log.slice(-2000)).toBe(true);
    expect(log).not.toMatch(/server is listening|all slots are idle/);
  });
});
