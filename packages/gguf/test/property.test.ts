import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GgufModel, layoutGguf, parseGguf, readGguf, readTensorData, serializeGguf, bufferSource } from "@compat/gguf";
import { arbitraryGgufModel } from "./helpers/arbitrary";
import { plainFields } from "./helpers/plain";

async function snapshot(m: GgufModel) {
  const tensors = [];
  for (const t of m.tensors) tensors.push({ name: t.name, type: t.type, shape: t.shape, bytes: await readTensorData(t) });
  return { version: m.version, littleEndian: m.littleEndian, alignment: m.alignment, fields: plainFields(m), tensors };
}

describe("properties", () => {
  it("read(write(m)) equals m", async () => {
    await fc.assert(
      fc.asyncProperty(arbitraryGgufModel(), async (m) => {
        const bytes = await serializeGguf(m);
        const back = parseGguf(bytes);
        expect(await snapshot(back)).toEqual(await snapshot(m));
      }),
      { numRuns: 150 },
    );
  });

  it("write(read(f)) is byte-identical for canonical files, via buffers and chunked sources", async () => {
    await fc.assert(
      fc.asyncProperty(arbitraryGgufModel(), fc.integer({ min: 1, max: 300 }), async (m, chunk) => {
        const f = await serializeGguf(m);
        expect(await serializeGguf(parseGguf(f))).toEqual(f);
        const viaSource = await readGguf({ ...bufferSource(f) }, { initialChunk: chunk });
        expect(await serializeGguf(viaSource)).toEqual(f);
      }),
      { numRuns: 100 },
    );
  });

  it("layout: data section aligned, tensors contiguous in info order, padded to the end", () => {
    fc.assert(
      fc.property(arbitraryGgufModel(), (m) => {
        const l = layoutGguf(m);
        expect(l.dataOffset % l.alignment).toBe(0);
        let next = 0;
        for (let i = 0; i < m.tensors.length; i++) {
          expect(l.tensorOffsets[i]).toBe(next);
          next += Math.ceil(l.tensorSizes[i]! / l.alignment) * l.alignment;
        }
        expect(l.totalSize).toBe(l.dataOffset + next);
      }),
    );
  });

  it("flipping byte order twice gives back the same file", async () => {
    await fc.assert(
      fc.asyncProperty(arbitraryGgufModel({ maxTensors: 2 }), async (m) => {
        const f = await serializeGguf(m);
        const flipped = parseGguf(f);
        flipped.littleEndian = !flipped.littleEndian;
        const g = parseGguf(await serializeGguf(flipped));
        expect(g.littleEndian).toBe(!m.littleEndian);
        g.littleEndian = !g.littleEndian;
        expect(await serializeGguf(g)).toEqual(f);
      }),
      { numRuns: 60 },
    );
  });
});
