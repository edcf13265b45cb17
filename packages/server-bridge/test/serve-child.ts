// Run by lifetime.test.ts in a process of its own: serves one GGUF with the bridge, prints
// llama-server's pid and URL, and waits to be killed.
import { startServer } from "@compat/server-bridge";

const [model, llamaServer, cacheDir] = process.argv.slice(2) as [string, string, string];
const server = await startServer({ model, llamaServer, cache: { dir: cacheDir }, args: ["--threads", "1", "--no-warmup"] });
process.stdout.write(JSON.stringify({ pid: server.pid, url: server.url }) + "\n");
setInterval(() => undefined, 60_000);
