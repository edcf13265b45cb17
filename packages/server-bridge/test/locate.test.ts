import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { BridgeError, findLlamaTool } from "@compat/server-bridge";
import { tempDirs } from "./helpers";

const temp = tempDirs();

async function fakeTool(dir: string, name = "llama-server"): Promise<string> {
  await mkdir(dir, { recursive: true });
  const p = join(dir, name);
  await writeFile(p, "#!/bin/sh\n");
  await chmod(p, 0o755);
  return p;
}

describe("finding llama-server", () => {
  it("explicit path, then $LLAMA_SERVER, then PATH, then $LLAMA_BIN, then the build cache (newest)", async () => {
    const root = await temp();
    const explicit = await fakeTool(join(root, "explicit"));
    const fromEnv = await fakeTool(join(root, "env"));
    const onPath = await fakeTool(join(root, "path"));
    const llamaBin = await fakeTool(join(root, "llamabin"));
    const cached = await fakeTool(join(root, "cache", "llama.cpp", "abc-rpc", "bin"));
    const base = { HOME: root, OLLAMA_COMPAT_CACHE: join(root, "cache") };
    expect(findLlamaTool("llama-server", { explicit, env: { ...base, LLAMA_SERVER: fromEnv, PATH: join(root, "path") } })).toBe(explicit);
    expect(findLlamaTool("llama-server", { env: { ...base, LLAMA_SERVER: fromEnv, PATH: join(root, "path") } })).toBe(fromEnv);
    expect(findLlamaTool("llama-server", { env: { ...base, PATH: `/nonexistent:${join(root, "path")}`, LLAMA_BIN: join(root, "llamabin") } })).toBe(onPath);
    expect(findLlamaTool("llama-server", { env: { ...base, PATH: "/nonexistent", LLAMA_BIN: join(root, "llamabin") } })).toBe(llamaBin);
    expect(findLlamaTool("llama-server", { env: { ...base, PATH: "/nonexistent" } })).toBe(cached);
    // rpc-server is looked up the same way, beside llama-server in the build cache
    const rpc = await fakeTool(join(root, "cache", "llama.cpp", "abc-rpc", "bin"), "rpc-server");
    expect(findLlamaTool("rpc-server", { env: { ...base, PATH: "/nonexistent" } })).toBe(rpc);
  });

  it("a given path that is not an executable is an error, not a reason to look further", async () => {
    const root = await temp();
    await fakeTool(join(root, "path"));
    const err = (() => {
      try {
        findLlamaTool("llama-server", { explicit: join(root, "nope"), env: { PATH: join(root, "path") } });
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(BridgeError);
    expect((err as BridgeError).code).toBe("LLAMA_SERVER_NOT_FOUND");
    expect((err as BridgeError).message).toContain(join(root, "nope"));
    expect(() => findLlamaTool("llama-server", { env: { PATH: "/nonexistent", HOME: root, OLLAMA_COMPAT_CACHE: join(root, "none") } })).toThrow(/scripts\/build-llama-tools\.sh/);
  });
});
