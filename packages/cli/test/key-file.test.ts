import type { ChildProcess } from "node:child_process";
import { execFileSync } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { generateFixtureFiles } from "@compat/testkit";
import { buildOllamaStore } from "@compat/store";
import { spawnCli } from "./helpers";

/**
 * `serve --api-key-file` against what a hostile or careless setup gives it (issue #35, item 10):
 * a FIFO once hung serve silently (and SIGTERM did not end it), /dev/zero was read for 600 MB.
 */
const dirs: string[] = [];
const children: ChildProcess[] = [];
let root: string;
let dir: string;
async function temp(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "compat-cli-key-"));
  dirs.push(d);
  return d;
}
beforeAll(async () => {
  root = await temp();
  dir = await temp();
  const gemma = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "1b" }, await temp());
  await buildOllamaStore(root, [{ name: "gemma3:1b", model: gemma.text, params: { num_ctx: 512 } }]);
});
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

function start(args: string[]) {
  const s = spawnCli(args, { LLAMA_API_KEY: undefined });
  children.push(s.child);
  return s;
}

/** serve with a key file, and a llama-server that is not there: a key that is accepted gets as far as LLAMA_SERVER_NOT_FOUND. */
async function serveWithKey(keyFile: string) {
  const s = start(["serve", "gemma3:1b", "--models", root, "--cache-dir", await temp(), "--no-mount", "--api-key-file", keyFile, "--llama-server", "/nonexistent/llama-server"]);
  const { code } = await s.closed;
  return { code, ...s.out };
}

async function keyFile(name: string, text: string | Buffer, mode = 0o600): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, text, { mode });
  await chmod(path, mode);
  return path;
}

describe("serve --api-key-file: only a regular file, one key on one line", () => {
  it("a FIFO, a device or a directory is a usage error at once, naming the flag, the file and what it is", async () => {
    const fifo = join(dir, "key.fifo");
    execFileSync("mkfifo", [fifo]);
    const folder = join(dir, "a-folder");
    await mkdir(folder);
    for (const [path, kind] of [
      [fifo, "a FIFO"],
      ["/dev/zero", "a character device"],
      [folder, "a directory"],
    ] as const) {
      const r = await serveWithKey(path);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(`--api-key-file ${path}: not a regular file (${kind})`);
      expect(r.stderr.trim().split("\n"), r.stderr).toHaveLength(1);
    }
  }, 120_000);

  it("a file larger than a key file may be is refused without reading it all", async () => {
    const r = await serveWithKey(await keyFile("huge", Buffer.alloc(1 << 20, 0x61)));
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/--api-key-file .*huge: 1048576 bytes: larger than a key file may be \(65536 bytes\)/);
  });

  it("a line break inside the key is refused; one trailing line end is not part of the key", async () => {
    for (const text of ["abc\ndef\n", "abc\r\ndef", "abc\n\n"]) {
      const r = await serveWithKey(await keyFile("two-lines", text));
      expect(r.code, JSON.stringify(text)).toBe(2);
      expect(r.stderr).toMatch(/--api-key-file .*two-lines: the key has a line break inside it/);
    }
    const comma = await serveWithKey(await keyFile("comma", "abc,def\n"));
    expect(comma.code).toBe(2);
    expect(comma.stderr).toMatch(/comma/);
    for (const text of ["sesame\n", "sesame\r\n", "sesame"]) {
      const r = await serveWithKey(await keyFile("one-line", text));
      expect(r.code, `${JSON.stringify(text)}: ${r.stderr}`).toBe(1);
      expect(r.stderr).toMatch(/LLAMA_SERVER_NOT_FOUND/);
      expect(r.stderr).not.toMatch(/--api-key-file/);
    }
  }, 120_000);

  it("a key file other users may read gets a warning, as ssh gives; a private one does not", async () => {
    const open = await serveWithKey(await keyFile("open", "sesame\n", 0o644));
    expect(open.stderr).toMatch(/warning: --api-key-file .*open has permissions 0644: other users can read or change the API key \(chmod 600 /);
    expect(open.stderr).toMatch(/LLAMA_SERVER_NOT_FOUND/);
    const group = await serveWithKey(await keyFile("group", "sesame\n", 0o640));
    expect(group.stderr).toMatch(/permissions 0640/);
    const closed = await serveWithKey(await keyFile("closed", "sesame\n", 0o600));
    expect(closed.stderr).not.toMatch(/warning/);
  }, 120_000);

  it("SIGTERM while serve starts with a key file ends it", async () => {
    // a llama-server that says one line and never listens
    const stand = join(dir, "never-ready-llama-server");
    await writeFile(stand, "#!/bin/sh\necho stand-in up\nexec sleep 600\n", { mode: 0o755 });
    const s = start(["serve", "gemma3:1b", "--models", root, "--cache-dir", await temp(), "--no-mount", "--api-key-file", await keyFile("start", "sesame\n"), "--llama-server", stand]);
    await s.waitFor(/stand-in up/, "stderr");
    s.child.kill("SIGTERM");
    const { code } = await s.closed;
    expect(code, s.out.stderr).toBe(143);
  }, 180_000);
});
