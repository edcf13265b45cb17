import { readFile } from "node:fs/promises";
import { afterEach, describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { BridgeError, isLoopback, startServer, type SingleServer } from "@compat/server-bridge";
import { llamaServerPath, SMALL, tempDirs } from "./helpers";

const temp = tempDirs();
const running: SingleServer[] = [];
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop();
});

describe("who can reach the server", () => {
  it("loopback addresses are told apart from the rest", () => {
    for (const h of ["127.0.0.1", "127.1.2.3", "::1", "localhost"]) expect(isLoopback(h)).toBe(true);
    for (const h of ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com", "127.0.0.1.evil"]) expect(isLoopback(h)).toBe(false);
  });

  it("refuses to bind beyond loopback without an API key (before anything starts)", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const e = await startServer({ model: fx.text, host: "0.0.0.0", llamaServer: await llamaServerPath(), args: SMALL }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(BridgeError);
    expect((e as BridgeError).code).toBe("INSECURE_BIND");
  });

  it("an API key reaches llama-server through its environment, not its command line", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const apiKey = "secret-key-for-this-test";
    const server = await startServer({ model: fx.text, apiKey, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL });
    running.push(server);
    expect(server.command.join(" ")).not.toContain(apiKey);
    const cmdline = await readFile(`/proc/${server.pid}/cmdline`, "utf8");
    expect(cmdline).not.toContain(apiKey);
    const ask = (headers: Record<string, string>) =>
      fetch(`${server.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ prompt: "hi", max_tokens: 1 }) });
    expect((await ask({})).status).toBe(401);
    expect((await ask({ authorization: `Bearer ${apiKey}` })).status).toBe(200);
  });
});
