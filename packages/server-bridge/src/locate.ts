import { accessSync, constants, readdirSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, join } from "node:path";
import { BridgeError } from "./errors";

function executable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/** bin directories of scripts/build-llama-tools.sh's cache, newest first. */
function buildCacheBins(env: Record<string, string | undefined>): string[] {
  const base = join(env.OLLAMA_COMPAT_CACHE || join(homedir(), ".cache", "ollama-compat"), "llama.cpp");
  let names: string[];
  try {
    names = readdirSync(base);
  } catch {
    return [];
  }
  return names
    .map((n) => join(base, n, "bin"))
    .filter((d) => executable(join(d, "llama-server")))
    .sort((a, b) => statSync(join(b, "llama-server")).mtimeMs - statSync(join(a, "llama-server")).mtimeMs);
}

/**
 * A llama.cpp tool (llama-server, rpc-server): the explicit path, then `$LLAMA_SERVER`
 * (or `$RPC_SERVER`), then PATH, then `$LLAMA_BIN` and the build cache of
 * scripts/build-llama-tools.sh. The first that is given wins: a given path that is not
 * an executable is an error, not a reason to look further.
 */
export function findLlamaTool(
  tool: "llama-server" | "rpc-server",
  opts: { explicit?: string; env?: Record<string, string | undefined> } = {},
): string {
  const env = opts.env ?? process.env;
  const envName = tool === "llama-server" ? "LLAMA_SERVER" : "RPC_SERVER";
  const given = opts.explicit ?? env[envName];
  if (given) {
    if (executable(given)) return given;
    throw new BridgeError("LLAMA_SERVER_NOT_FOUND", `${tool} not found: ${given} (from ${opts.explicit ? "the command line" : `$${envName}`}) is not an executable file`, { path: given });
  }
  for (const dir of (env.PATH ?? "").split(delimiter)) {
    if (dir && executable(join(dir, tool))) return join(dir, tool);
  }
  const bins = [...(env.LLAMA_BIN ? [env.LLAMA_BIN] : []), ...buildCacheBins(env)];
  for (const dir of bins) if (executable(join(dir, tool))) return join(dir, tool);
  throw new BridgeError(
    "LLAMA_SERVER_NOT_FOUND",
    `${tool} not found: pass --llama-server PATH, set $${envName}, put it on PATH, or build it with scripts/build-llama-tools.sh`,
  );
}
