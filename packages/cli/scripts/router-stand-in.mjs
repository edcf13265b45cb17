#!/usr/bin/env node
// What the code cache's warm-up (scripts/code-cache.ts) runs `serve --all` against, as the build
// has no llama-server: it starts as llama-server's router does (listens on --host and a port of
// the kernel's choosing, says so in llama-server's words) and answers what serve asks of a
// router while it starts (/health, and /models?reload=1 when the preset is read again). It
// serves no model: the warm-up ends at serve's ready line.
import { createServer } from "node:http";

const args = process.argv.slice(2);
const at = args.indexOf("--host");
const host = at >= 0 ? args[at + 1] : "127.0.0.1";
const server = createServer((req, res) => {
  const path = (req.url ?? "").split("?")[0];
  const body = path === "/health" ? { status: "ok" } : path === "/models" || path === "/v1/models" ? { data: [], object: "list" } : undefined;
  res.writeHead(body ? 200 : 404, { "content-type": "application/json" });
  res.end(JSON.stringify(body ?? { error: { code: 404, message: "File Not Found" } }));
});
server.listen(0, host, () => process.stderr.write(`srv  llama_server: listening on http://${host}:${server.address().port}\n`));
process.on("SIGTERM", () => process.exit(0));
