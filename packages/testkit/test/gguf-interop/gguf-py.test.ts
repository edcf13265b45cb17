// Interop with llama.cpp's own Python gguf package (gguf-py from the llama.cpp tree we target):
// files it writes must read correctly and rewrite byte-identically; files we write must read
// back in it with the same content. Little- and big-endian.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgufValueType, readGguf, serializeGguf, writeGguf, ggufArray } from "@compat/gguf";
import { llamaCppSourceDir } from "@compat/testkit";
import { plainFields, plainTensors } from "../../../gguf/test/helpers/plain";

// gguf-py from the llama.cpp tree scripts/build-llama-tools.sh checks out (or GGUF_PY).
const GGUF_PY = process.env.GGUF_PY ?? join((await llamaCppSourceDir()) ?? "", "gguf-py");
const SCRIPT = fileURLToPath(new URL("./gguf_py_interop.py", import.meta.url));

/** numpy is the one thing gguf-py needs that this repo cannot install (PyPI is out of reach here). */
function havePython(): boolean {
  try {
    execFileSync("python3", ["-c", "import numpy"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

function py(...args: string[]): string {
  return execFileSync("python3", [SCRIPT, ...args], { env: { ...process.env, PYTHONPATH: GGUF_PY }, encoding: "utf8", maxBuffer: 1 << 26 });
}

interface Dump {
  byteOrder: string;
  fields: unknown[];
  tensors: unknown[];
}

it("finds gguf-py in the llama.cpp tree", () => {
  expect(existsSync(join(GGUF_PY, "gguf")), `gguf-py not found at ${GGUF_PY}`).toBe(true);
});

describe.skipIf(!havePython())("interop with llama.cpp's gguf-py", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "gguf-py-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  for (const order of ["little", "big"] as const) {
    it(`reads a ${order}-endian file written by gguf-py and rewrites it byte-identically`, async () => {
      const path = join(dir, `py-${order}.gguf`);
      py("write", path, order);
      const expected = JSON.parse(py("dump", path)) as Dump;
      const m = await readGguf(path, { initialChunk: 256 });
      try {
        expect(m.littleEndian).toBe(order === "little");
        expect(plainFields(m)).toEqual(expected.fields);
        expect(await plainTensors(m)).toEqual(expected.tensors);
        const original = new Uint8Array(await readFile(path));
        expect(await serializeGguf(m)).toEqual(original);
      } finally {
        await m.close();
      }
    });

    it(`writes a ${order}-endian file that gguf-py reads back`, async () => {
      const src = join(dir, `src-${order}.gguf`);
      py("write", src, "little");
      const m = await readGguf(src);
      try {
        m.littleEndian = order === "little";
        m.setString("added.str", "ünïcode ✓");
        m.setArray("added.f32", GgufValueType.FLOAT32, new Float32Array([1, 2, 3]));
        m.setArray("added.strs", GgufValueType.STRING, ["", "b", "ç"]);
        m.set("added.nested.u16", GgufValueType.ARRAY, ggufArray(GgufValueType.UINT16, [65535, 0]));
        m.setU32("v.u32", 1); // replaced in place
        m.renameTensor("t.i8", "t.renamed");
        const out = join(dir, `ours-${order}.gguf`);
        await writeGguf(m, out);
        const dump = JSON.parse(py("dump", out)) as Dump;
        expect(dump.byteOrder).toBe(order === "little" ? "I" : "S");
        expect(dump.fields).toEqual(plainFields(m));
        expect(dump.tensors).toEqual(await plainTensors(m));
      } finally {
        await m.close();
      }
    });
  }

  it("a big-endian file's header converts to the little-endian one byte for byte", async () => {
    const le = join(dir, "h-le.gguf");
    const be = join(dir, "h-be.gguf");
    py("write", le, "little");
    py("write", be, "big");
    const mb = await readGguf(be);
    const ml = await readGguf(le);
    try {
      mb.littleEndian = true;
      const a = await serializeGguf(mb);
      const b = await serializeGguf(ml);
      expect(a.subarray(0, ml.dataOffset)).toEqual(b.subarray(0, ml.dataOffset));
    } finally {
      await mb.close();
      await ml.close();
    }
  });
});
