import { execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgmlType, GgufError, GgufModel, parseGguf, readGguf, writeGguf, type ByteSource } from "@compat/gguf";
import { COPY_CHUNK } from "../src/tensor-data";
import { RawGguf } from "./helpers/raw";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "gguf-reliability-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A source that serves its first chunk, then fails like a file truncated under us. */
function shrinkingSource(size: number): ByteSource {
  const fail = (offset: number) =>
    Promise.reject(new GgufError("TRUNCATED", "file ended", { source: "shrinking.gguf", offset }));
  return {
    name: "shrinking.gguf",
    size,
    read: (offset, length) => (offset >= COPY_CHUNK ? fail(offset) : Promise.resolve(new Uint8Array(length))),
    readInto: (target, offset) => (offset >= COPY_CHUNK ? fail(offset) : Promise.resolve(void target.fill(0))),
  };
}

function modelOver(source: ByteSource, length: number): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "x");
  m.addTensor({ name: "big", type: GgmlType.I8, shape: [length], data: { kind: "range", source, offset: 0, length } });
  return m;
}

describe("atomic writes under failure", () => {
  it("a source failing during the read-ahead gives its typed error, removes the temp file and writes nothing", async () => {
    const length = 3 * COPY_CHUNK;
    const out = join(dir, "truncated-out.gguf");
    // vitest fails the run on an unhandled rejection: the read-ahead must be handled while the write is awaited
    await expect(writeGguf(modelOver(shrinkingSource(length), length), out)).rejects.toMatchObject({ code: "TRUNCATED" });
    expect(existsSync(out)).toBe(false);
    expect((await readdir(dir)).filter((e) => e.endsWith(".tmp"))).toEqual([]);
  });

  it("removes temp files that dead processes left for the same output, and keeps a live writer's", async () => {
    const out = join(dir, "stale.gguf");
    const dead = spawn(process.execPath, ["-e", "0"]);
    await new Promise((r) => dead.on("close", r));
    const alive = spawn("sleep", ["30"]);
    const staleName = `.stale.gguf.${dead.pid}.abcdef012345.tmp`;
    const liveName = `.stale.gguf.${alive.pid}.0123456789ab.tmp`;
    const otherName = `.other.gguf.${dead.pid}.abcdef012345.tmp`;
    for (const n of [staleName, liveName, otherName]) await writeFile(join(dir, n), "partial");
    try {
      await writeGguf(modelOver({ name: "zeros", size: 16, read: async (_o, l) => new Uint8Array(l) }, 16), out);
      const left = await readdir(dir);
      expect(left).not.toContain(staleName);
      expect(left).toContain(liveName);
      expect(left).toContain(otherName);
      const written = await readGguf(out);
      expect(written.tensors.map((t) => t.name)).toEqual(["big"]);
      await written.close();
    } finally {
      alive.kill();
    }
  });

  it("a write error names the output file", async () => {
    const out = join(dir, "no-such-dir", "x.gguf");
    const err = await writeGguf(modelOver({ name: "zeros", size: 16, read: async (_o, l) => new Uint8Array(l) }, 16), out).catch((e) => e);
    expect(err).toBeInstanceOf(GgufError);
    expect(err.code).toBe("IO");
    expect(err.message).toContain(out);
  });
});

describe("inputs that are not regular files", () => {
  it("a FIFO is refused at once instead of waiting for a writer", async () => {
    const fifo = join(dir, "pipe.gguf");
    execFileSync("mkfifo", [fifo]);
    const err = await readGguf(fifo).catch((e) => e);
    expect(err).toBeInstanceOf(GgufError);
    expect(err.message).toMatch(/not a regular file/);
    expect(err.message).toContain(fifo);
  });
});

describe("tensor lookups", () => {
  it("stay linear: 100k tensors renamed one by one", () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "x");
    const n = 100_000;
    for (let i = 0; i < n; i++) m.tensors.push({ name: `blk.${i}.w`, type: GgmlType.I8, shape: [1], data: { kind: "bytes", bytes: new Uint8Array(1) } });
    for (let i = 0; i < n; i++) m.renameTensor(`blk.${i}.w`, `blk.${i}.weight`);
    expect(m.hasTensor("blk.99999.weight")).toBe(true);
    expect(m.hasTensor("blk.0.w")).toBe(false);
    m.dropTensor("blk.5.weight");
    expect(m.findTensor("blk.6.weight")).toBe(m.tensors[5]);
    m.addTensor({ name: "blk.5.weight", type: GgmlType.I8, shape: [1], data: { kind: "bytes", bytes: new Uint8Array(1) } }, { before: "blk.6.weight" });
    expect(m.tensors[5]!.name).toBe("blk.5.weight");
    // replacing or filtering the public array is seen
    m.tensors = m.tensors.filter((t) => t.name !== "blk.7.weight");
    expect(m.hasTensor("blk.7.weight")).toBe(false);
    expect(m.findTensor("blk.8.weight")).toBe(m.tensors[7]);
  });
});

describe("typed access errors name the file and the key's offset", () => {
  // header (24 bytes), then "general.name" = "x" (8 + 12 + 4 + 8 + 1 = 33 bytes), then general.architecture as a UINT32
  const bytes = new RawGguf().header(0, 2).kvStr("general.name", "x").kvU32("general.architecture", 7).build();
  const keyAt = 24 + 33;

  const expectNamed = (f: () => unknown, source: string, offset?: number) => {
    let err: unknown;
    try {
      f();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(GgufError);
    const g = err as GgufError;
    expect(g.code).toBe("KV_TYPE");
    expect(g.source).toBe(source);
    expect(g.offset).toBe(offset);
    expect(g.message).toContain(source);
  };

  it("parseGguf and readGguf: KV_TYPE on general.architecture gives the file and where its KV starts", async () => {
    expect(new TextDecoder().decode(bytes.subarray(keyAt + 8, keyAt + 8 + 20))).toBe("general.architecture");
    const parsed = parseGguf(bytes, "mem.gguf");
    expectNamed(() => parsed.getString("general.architecture"), "mem.gguf", keyAt);
    const path = join(dir, "wrong-arch-type.gguf");
    await writeFile(path, bytes);
    const read = await readGguf(path);
    try {
      expectNamed(() => read.getString("general.architecture"), path, keyAt);
      expectNamed(() => read.getString("general.architecture", "fallback"), path, keyAt);
      expectNamed(() => read.getBool("general.name"), path, 24);
      // a copy (as the translators edit) still names the file; a KV set since has no offset in it
      const copy = read.clone();
      expectNamed(() => copy.getString("general.architecture"), path, keyAt);
      copy.setU32("general.name", 1);
      expectNamed(() => copy.getString("general.name"), path, undefined);
    } finally {
      await read.close();
    }
  });

  it("a missing key or tensor names the file too", () => {
    const parsed = parseGguf(bytes, "mem.gguf");
    expect(() => parsed.getU32("nope")).toThrow(/^mem\.gguf: metadata key "nope" is missing/);
    expect(() => parsed.tensor("nope")).toThrow(/^mem\.gguf: no tensor named "nope"/);
  });

  it("a general.alignment of the wrong type is reported at its KV, not at offset 0", () => {
    const bad = new RawGguf().header(0, 2).kvStr("general.name", "x").str("general.alignment").i32(10).u64(32).build();
    expect(() => parseGguf(bad, "align.gguf")).toThrow(expect.objectContaining({ code: "BAD_ALIGNMENT", offset: keyAt, source: "align.gguf" }));
  });
});
