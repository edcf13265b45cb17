import { dirname, join } from "node:path";
import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { findLlamaTools, generateFixtureFiles, SMALL_SERVER_ARGS } from "@compat/testkit";
import { findLlamaTool, freePort, LlamaChild, startServer, type SingleServer } from "@compat/server-bridge";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { chat, chatContent, tempDirs } from "./helpers";

const temp = tempDirs();
const stops: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const s of stops.splice(0).reverse()) await s();
});

async function listening(port: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((r) => {
      const s = connect(port, "127.0.0.1", () => {
        s.destroy();
        r(true);
      });
      s.on("error", () => r(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`rpc-server not listening on ${port}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("--rpc (real rpc-server on loopback)", () => {
  it("serves a translated model whose layers live on an rpc-server worker", async () => {
    const tools = await findLlamaTools();
    // the tools build with GGML_RPC=ON: rpc-server and the llama-server beside it
    const rpcServer = findLlamaTool("rpc-server", { env: { ...process.env, LLAMA_BIN: tools.binDir } });
    const llamaServer = join(dirname(rpcServer), "llama-server");

    const port = await freePort();
    const rpcLog: string[] = [];
    const worker = new LlamaChild({ command: rpcServer, args: ["-H", "127.0.0.1", "-p", String(port), "-t", "2"], onLog: (l) => rpcLog.push(l) });
    stops.push(() => worker.stop());
    await listening(port);

    const root = await temp();
    const fx = await generateFixtureFiles("gemma3", { seed: 4, layout: "ollama", variant: "1b" }, await temp());
    await buildOllamaStore(root, [{ name: "gemma3:1b", model: fx.text, params: { num_ctx: 512 } }]);
    const log: string[] = [];
    const server: SingleServer = await startServer({
      model: "gemma3:1b",
      store: new ModelStore(root),
      cache: { dir: await temp() },
      llamaServer,
      rpc: [`127.0.0.1:${port}`],
      // every layer on the worker; -lv 4 for the model-loading lines
      args: [...SMALL_SERVER_ARGS, "--n-gpu-layers", "99", "--log-verbosity", "4"],
      onLog: (l) => log.push(l),
    });
    stops.push(() => server.stop());
    expect(server.command.join(" ")).toContain(`--rpc 127.0.0.1:${port}`);
    expect(server.model.translated).toBe(true);

    const r = await chat(server.url, "gemma3:1b");
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(typeof chatContent(r.body), JSON.stringify(r.body)).toBe("string");
    expect(rpcLog.some((l) => l.includes("Accepted client connection"))).toBe(true);
    // llama.cpp put the layers and their weights on the RPC device (model-loading lines need -lv 4)
    expect(log.some((l) => l.includes(`RPC0[127.0.0.1:${port}] model buffer size`)), log.join("\n")).toBe(true);
    expect(log.some((l) => /offloaded (\d+)\/\1 layers/.test(l))).toBe(true);
  });
});
