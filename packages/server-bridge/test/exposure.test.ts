import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { generateFixtureFiles, SMALL_SERVER_ARGS } from "@compat/testkit";
import { bindingFromArgs, BridgeError, freePort, isLoopback, startServer, type SingleServer } from "@compat/server-bridge";
import { llamaServerPath, tempDirs } from "./helpers";

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
    const e = await startServer({ model: fx.text, host: "0.0.0.0", llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(BridgeError);
    expect((e as BridgeError).code).toBe("INSECURE_BIND");
  });

  it("an API key reaches llama-server through its environment, not its command line", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const apiKey = "secret-key-for-this-test";
    const server = await startServer({ model: fx.text, apiKey, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS });
    running.push(server);
    expect(server.command.join(" ")).not.toContain(apiKey);
    const cmdline = await readFile(`/proc/${server.pid}/cmdline`, "utf8");
    expect(cmdline).not.toContain(apiKey);
    const ask = (headers: Record<string, string>) =>
      fetch(`${server.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ prompt: "hi", max_tokens: 1 }) });
    expect((await ask({})).status).toBe(401);
    expect((await ask({ authorization: `Bearer ${apiKey}` })).status).toBe(200);
    // what the bridge asks of it goes with the key
    expect((await fetch(`${server.url}/models`)).status).toBe(401);
    expect((await server.get("/models")).status).toBe(200);
  });

  it("a key given only in a key file (-- --api-key-file): the bridge's own requests carry its first key", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const keys = join(await temp(), "keys");
    await writeFile(keys, "# the keys of this server\nfirst-key\nsecond-key\n", { mode: 0o600 });
    const server = await startServer({ model: fx.text, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: [...SMALL_SERVER_ARGS, "--api-key-file", keys] });
    running.push(server);
    expect((await fetch(`${server.url}/models`)).status).toBe(401);
    const { status, body } = await server.get("/models");
    expect(status).toBe(200);
    expect((JSON.parse(body) as { data: unknown[] }).data).toHaveLength(1);
  });
});

/** The local address of the socket `pid` listens on (hex, as /proc/net/tcp has it: 00000000 is every interface). */
async function listenAddress(pid: number, port: number): Promise<string | undefined> {
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  for (const table of ["tcp", "tcp6"]) {
    for (const line of (await readFile(`/proc/${pid}/net/${table}`, "utf8")).split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] === "0A" && f[1]?.endsWith(`:${hexPort}`)) return f[1].split(":")[0];
    }
  }
  return undefined;
}

describe("pass-through arguments are held to the same rules (issue 27, item 4)", () => {
  it("-- --host 0.0.0.0 without a key is refused before anything starts, and the error names the argument", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    for (const args of [["--host", "0.0.0.0"], ["--host", "127.0.0.1", "--threads", "2", "--host", "::"], ["--host", "0"]]) {
      const e = await startServer({ model: fx.text, llamaServer: await llamaServerPath(), args: [...SMALL_SERVER_ARGS, ...args] }).catch((x: unknown) => x);
      expect(e, args.join(" ")).toBeInstanceOf(BridgeError);
      expect((e as BridgeError).code).toBe("INSECURE_BIND");
      expect((e as BridgeError).message).toContain(`from the llama-server argument --host ${args[args.length - 1]}`);
    }
  });

  it("with insecure: it listens on every interface, and the URL says 0.0.0.0, not 127.0.0.1", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const server = await startServer({ model: fx.text, insecure: true, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: [...SMALL_SERVER_ARGS, "--host", "0.0.0.0"] });
    running.push(server);
    expect(server.url).toMatch(/^http:\/\/0\.0\.0\.0:\d+$/);
    expect(await listenAddress(server.pid, server.port)).toBe("00000000");
    // one --host on its command line: ours, with the value given
    expect(server.command.filter((a) => a === "--host")).toHaveLength(1);
    expect(server.command[server.command.indexOf("--host") + 1]).toBe("0.0.0.0");
  });

  it("-- --api-key K counts as a key, and leaves argv for the environment", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const key = "passed-through-key";
    const server = await startServer({ model: fx.text, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: [...SMALL_SERVER_ARGS, "--api_key", key, "--host", "0.0.0.0"] });
    running.push(server);
    expect(await readFile(`/proc/${server.pid}/cmdline`, "utf8")).not.toContain(key);
    const ask = (headers: Record<string, string>) =>
      fetch(`${server.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ prompt: "hi", max_tokens: 1 }) });
    expect((await ask({})).status).toBe(401);
    expect((await ask({ authorization: `Bearer ${key}` })).status).toBe(200);
  });

  it("-- --port N and -- --api-prefix P: the URL is where it really answers", async () => {
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, await temp());
    const port = await freePort();
    const server = await startServer({ model: fx.text, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: [...SMALL_SERVER_ARGS, "--port", String(port), "--api-prefix", "/llm"] });
    running.push(server);
    expect(server.url).toBe(`http://127.0.0.1:${port}/llm`);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect(server.command.filter((a) => a === "--port")).toHaveLength(1);
  });

  it("what the bridge cannot honour is refused: a unix socket, TLS files, a key file with no key", async () => {
    const empty = join(await temp(), "keys");
    await writeFile(empty, "# no key here\n\n");
    for (const args of [["--host", "/tmp/llama.sock"], ["--ssl-key-file", "k.pem", "--ssl-cert-file", "c.pem"], ["--api-key-file", empty], ["--port", "http"], ["--host"]]) {
      const e = (() => {
        try {
          bindingFromArgs(args);
        } catch (x) {
          return x;
        }
        return undefined;
      })();
      expect(e, args.join(" ")).toBeInstanceOf(BridgeError);
      expect((e as BridgeError).code, args.join(" ")).toBe("BAD_ARGUMENT");
    }
    const keys = join(await temp(), "keys");
    await writeFile(keys, "# comment\nsecret\n");
    expect(bindingFromArgs(["--threads", "2", "--api-key-file", keys, "--host", "::1"])).toEqual({ host: "::1", keyFile: keys, rest: ["--threads", "2", "--api-key-file", keys] });
  });
});
