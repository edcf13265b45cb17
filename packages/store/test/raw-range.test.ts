/**
 * rawRange against a real HTTP server: a plain 206 lands in the caller's buffers byte for byte,
 * whatever their sizes; any other reply is "unsupported" (fetch takes it) or a typed error.
 */
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rawRange } from "../src/raw-range";

const blob = randomBytes(3 << 20);
let server: Server;
let base: URL;
beforeAll(async () => {
  server = createServer((req, res) => {
    const [, s, e] = /bytes=(\d+)-(\d+)/.exec(req.headers.range ?? "") ?? [];
    const start = Number(s);
    const end = Number(e);
    const body = blob.subarray(start, end + 1);
    if (req.url === "/chunked") {
      res.writeHead(206, { "content-range": `bytes ${start}-${end}/${blob.length}` }); // no length: chunked
      res.end(body);
    } else if (req.url === "/short") {
      res.writeHead(206, { "content-range": `bytes ${start}-${end}/${blob.length}`, "content-length": String(body.length) });
      res.write(body.subarray(0, body.length >> 1));
      res.destroy();
    } else {
      res.writeHead(206, { "content-range": `bytes ${start}-${end}/${blob.length}`, "content-length": String(body.length) });
      res.end(body);
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = new URL(`http://127.0.0.1:${(server.address() as { port: number }).port}`);
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

/**
 * A sink of batches of `size` bytes: a full one is taken at once and the next offered (space() is
 * never empty, as the blob stream's), the socket paused until a busy consumer's promise settles.
 */
function batches(size: number) {
  const got: Buffer[] = [];
  const buf = new Uint8Array(size);
  let fill = 0;
  return {
    got,
    flush: () => {
      got.push(Buffer.from(buf.subarray(0, fill)));
      fill = 0;
    },
    sink: {
      space: () => buf.subarray(fill),
      took(n: number) {
        fill += n;
        if (fill < size) return undefined;
        got.push(Buffer.from(buf));
        fill = 0;
        return new Promise<void>((r) => setTimeout(r, 1));
      },
    },
  };
}

describe("rawRange (real HTTP server)", () => {
  it("a plain 206: the range's bytes, in order, through batches of any size", async () => {
    for (const [start, end, size] of [[0, blob.length - 1, 1 << 20], [12345, 2_000_000, 70_001], [5, 5, 1 << 20]] as const) {
      const b = batches(size);
      expect(await rawRange(new URL("/blob", base), start, end, blob.length, undefined, b.sink)).toBe("done");
      b.flush();
      expect(Buffer.compare(Buffer.concat(b.got), blob.subarray(start, end + 1)), `${start}-${end} in ${size}`).toBe(0);
    }
  });

  it("a chunked reply is left to fetch; a connection that ends short is BAD_REGISTRY_REPLY", async () => {
    expect(await rawRange(new URL("/chunked", base), 0, 999, blob.length, undefined, batches(1 << 20).sink)).toBe("unsupported");
    await expect(rawRange(new URL("/short", base), 0, (1 << 20) - 1, blob.length, undefined, batches(1 << 20).sink)).rejects.toMatchObject({ code: "BAD_REGISTRY_REPLY" });
  });
});
