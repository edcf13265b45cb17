// Mutated and truncated files must either parse or fail with a GgufError: never another
// exception type (RangeError, TypeError, stack overflow), never a hang.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GgufError, bufferSource, layoutGguf, parseGguf, readGguf, serializeGguf } from "@compat/gguf";
import { arbitraryGgufModel } from "./helpers/arbitrary";

async function outcome(bytes: Uint8Array, chunk: number): Promise<string> {
  let sync: string;
  try {
    parseGguf(bytes, "fuzz", { fileSize: bytes.length });
    sync = "ok";
  } catch (e) {
    if (!(e instanceof GgufError)) throw e;
    sync = e.code;
  }
  let viaSource: string;
  try {
    await readGguf({ ...bufferSource(bytes, "fuzz") }, { initialChunk: chunk });
    viaSource = "ok";
  } catch (e) {
    if (!(e instanceof GgufError)) throw e;
    viaSource = e.code;
  }
  // The chunked reader and the one-shot parser must agree on every input.
  expect(viaSource).toBe(sync);
  return sync;
}

describe("fuzz", () => {
  it("byte mutations of valid files give a result or a GgufError, the same through every reader", async () => {
    const mutation = fc.record({ at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) });
    await fc.assert(
      fc.asyncProperty(arbitraryGgufModel({ maxTensors: 3 }), fc.array(mutation, { minLength: 1, maxLength: 4 }), fc.integer({ min: 8, max: 200 }), async (m, muts, chunk) => {
        const bytes = (await serializeGguf(m)).slice();
        // Aim at the header: that is where the parser looks.
        const headerSize = layoutGguf(m).dataOffset;
        for (const { at, value } of muts) bytes[at % headerSize] = value;
        await outcome(bytes, chunk);
      }),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 300) },
    );
  });

  it("truncations and random tails give a result or a GgufError", async () => {
    await fc.assert(
      fc.asyncProperty(arbitraryGgufModel({ maxTensors: 2 }), fc.nat(), fc.uint8Array({ maxLength: 64 }), async (m, cut, tail) => {
        const bytes = await serializeGguf(m);
        const prefix = bytes.subarray(0, cut % (bytes.length + 1));
        const mangled = new Uint8Array(prefix.length + tail.length);
        mangled.set(prefix);
        mangled.set(tail, prefix.length);
        await outcome(mangled, 16);
      }),
      { numRuns: 200 },
    );
  });
});
