// Large headers are read in steps (the parser works on one while the next is read) into
// buffers that start at the entry being parsed: the result must not depend on where the
// reads fall, and a failed parse must not leave a read in flight.
import { describe, expect, it } from "vitest";
import { GgufModel, GgufValueType, bufferSource, parseGguf, readGguf, serializeGguf, type ByteSource } from "@compat/gguf";

async function bigHeader(): Promise<Uint8Array> {
  const m = GgufModel.create();
  m.setString("general.architecture", "x");
  const words = Array.from({ length: 60_000 }, (_, i) => (i % 5 === 0 ? `Ġw${i}é` : `t${i}`));
  m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, words);
  m.setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, new Float32Array(words.length).map((_, i) => -i));
  m.setArray("tokenizer.ggml.merges", GgufValueType.STRING, words.slice(0, 40_000).map((w, i) => `${w} ${words[(i * 7) % words.length]}`));
  m.setString("tokenizer.chat_template", "{{ x }}");
  return serializeGguf(m);
}

/** A source that records its reads and can hold each one back until the test lets it go. */
function recording(bytes: Uint8Array): { source: ByteSource; reads: Array<[number, number]>; inFlight: () => number } {
  const inner = bufferSource(bytes, "steps");
  const reads: Array<[number, number]> = [];
  let pending = 0;
  const source: ByteSource = {
    name: inner.name,
    size: inner.size,
    async read(offset, length) {
      reads.push([offset, length]);
      pending++;
      await new Promise((r) => setTimeout(r, 1));
      pending--;
      return (await inner.read(offset, length)).slice();
    },
  };
  return { source, reads, inFlight: () => pending };
}

/** Where each item's bytes start in the file, for the string array under `key`. */
function itemOffsets(bytes: Uint8Array, key: string): number[] {
  const { raw } = parseGguf(bytes).getArray(key) as unknown as { raw: { region: Uint8Array; starts: Uint32Array } };
  const regionAt = raw.region.byteOffset - bytes.byteOffset;
  return Array.from(raw.starts, (s) => regionAt + s);
}

/** The error a parse of the whole buffer throws. */
function wholeParseError(bytes: Uint8Array): { code: string; offset: number } {
  try {
    parseGguf(bytes);
  } catch (e) {
    return e as { code: string; offset: number };
  }
  throw new Error("expected a parse error");
}

describe("stepped header reads", () => {
  it("give the same model as parsing the whole buffer, for any first chunk", async () => {
    const bytes = await bigHeader();
    expect(bytes.length).toBeGreaterThan(3 << 19); // more than one read step
    const whole = parseGguf(bytes);
    for (const initialChunk of [64, 4096, 1 << 20, 1_500_001]) {
      const { source, reads } = recording(bytes);
      const m = await readGguf(source, { initialChunk });
      expect(reads.length).toBeGreaterThan(initialChunk >= bytes.length ? 0 : 1);
      // joined / byte comparisons: deep equality of 100k-item arrays is slow on a busy machine
      for (const key of ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"]) expect(m.getStringArray(key).join("\n") === whole.getStringArray(key).join("\n")).toBe(true);
      expect(m.getNumberArray("tokenizer.ggml.scores").join() === whole.getNumberArray("tokenizer.ggml.scores").join()).toBe(true);
      expect(Buffer.compare(await serializeGguf(m), await serializeGguf(whole))).toBe(0);
    }
  });

  it("take their buffers from the caller's allocator, whose stale contents never show", async () => {
    const bytes = await bigHeader();
    const whole = parseGguf(bytes);
    for (const initialChunk of [64, 4096, 1 << 20]) {
      const sizes: number[] = [];
      // memory that was used before: every byte the model shows must be read or zeroed
      const allocate = (length: number): Uint8Array => (sizes.push(length), new Uint8Array(length).fill(0xee));
      const m = await readGguf(recording(bytes).source, { initialChunk, allocate });
      expect(sizes[0]).toBe(initialChunk);
      expect(sizes.length).toBeGreaterThan(1); // the buffer grew, through the allocator too
      for (const key of ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"]) expect(m.getStringArray(key).join("\n") === whole.getStringArray(key).join("\n")).toBe(true);
      expect(Buffer.compare(await serializeGguf(m), await serializeGguf(whole))).toBe(0);
    }
  });

  it("copy a numeric array that is off its item size in the file into the caller's memory", async () => {
    const n = 40_000; // 160,000 bytes of scores: large enough to come from the allocator
    const scores = new Float32Array(n).map((_, i) => i / 7 - 3);
    const types = new Int32Array(n).map((_, i) => (i % 3) - 1);
    let copied = 0;
    // strings of every length mod 4 before the arrays: some put them off a multiple of 4
    for (let pad = 0; pad < 4; pad++) {
      const m = GgufModel.create();
      m.setString("general.architecture", "x".repeat(1 + pad));
      m.setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, scores);
      m.setArray("tokenizer.ggml.token_type", GgufValueType.INT32, types);
      const bytes = await serializeGguf(m);
      const sizes: number[] = [];
      const allocate = (length: number): Uint8Array => (sizes.push(length), new Uint8Array(length).fill(0xee));
      const read = await readGguf(recording(bytes).source, { initialChunk: 4096, allocate });
      copied += sizes.filter((s) => s === n * 4).length;
      expect(read.getNumberArray("tokenizer.ggml.scores").join() === Array.from(scores).join()).toBe(true);
      expect(read.getNumberArray("tokenizer.ggml.token_type").join() === Array.from(types).join()).toBe(true);
      expect(Buffer.compare(await serializeGguf(read), bytes)).toBe(0);
    }
    expect(copied).toBeGreaterThan(0);
  });

  it("walk string arrays with the caller's compiled walk where one is given, to the same model", async () => {
    const bytes = await bigHeader();
    const whole = parseGguf(bytes);
    const seen: number[] = [];
    // the walk's contract, in JavaScript: what @compat/tensor-ops' addon does in C
    const walkStrings = (b: Uint8Array, q: number, i: number, n: number, stop: number, out: Float64Array): void => {
      seen.push(stop - q);
      const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
      while (i < n && q + 8 <= stop) {
        const len = dv.getUint32(q, true);
        if (len >= 0x80 || q + 8 + len > stop || dv.getUint32(q + 4, true) !== 0) break;
        q += 8 + len;
        i++;
      }
      out[0] = q;
      out[1] = i;
    };
    for (const initialChunk of [64, 1 << 20]) {
      const m = await readGguf(recording(bytes).source, { initialChunk, walkStrings });
      for (const key of ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"]) expect(m.getStringArray(key).join("\n") === whole.getStringArray(key).join("\n")).toBe(true);
      expect(Buffer.compare(await serializeGguf(m), bytes)).toBe(0);
    }
    expect(seen.length).toBeGreaterThan(0);
    expect(Math.max(...seen)).toBeLessThanOrEqual(1 << 16); // one window at a time, as the parser's own walk
  });

  it("reject a header cut short with the same error as a whole-buffer parse, with no read left in flight", async () => {
    const bytes = await bigHeader();
    // Corrupt one merge's length far into the header: found while later steps are being read.
    const at = itemOffsets(bytes, "tokenizer.ggml.merges")[30_000]! - 8;
    const bad = bytes.slice();
    new DataView(bad.buffer).setUint32(at + 4, 7, true);
    const direct = wholeParseError(bad);
    const { source, inFlight } = recording(bad);
    await expect(readGguf(source, { initialChunk: 4096 })).rejects.toMatchObject({ name: "GgufError", code: direct.code, offset: direct.offset });
    expect(inFlight()).toBe(0);
  });

  it("report a bad UTF-8 item with the same error wherever the reads and runs are cut", async () => {
    const bytes = await bigHeader();
    const merges = itemOffsets(bytes, "tokenizer.ggml.merges");
    for (const item of [0, 1, 17_000, 39_999]) {
      const bad = bytes.slice();
      bad[merges[item]!] = 0xff; // never valid in UTF-8
      const direct = wholeParseError(bad);
      expect(direct).toMatchObject({ code: "INVALID_UTF8", offset: merges[item]! });
      for (const initialChunk of [64, 4096, 700_001]) {
        const { source, inFlight } = recording(bad);
        await expect(readGguf(source, { initialChunk })).rejects.toMatchObject({ code: "INVALID_UTF8", offset: direct.offset });
        expect(inFlight()).toBe(0);
      }
    }
  });

  it("report the error a whole-buffer parse reports when a run has bad UTF-8 and a later item a bad length", async () => {
    // A parse of the whole buffer validates a run of short items when the run ends, so the bad
    // length of a later item in the same run is found first; a read cut between them must agree.
    for (const littleEndian of [true, false]) {
      const m = GgufModel.create({ littleEndian });
      m.setArray("k", GgufValueType.STRING, Array.from({ length: 40 }, (_, i) => `item${i}`));
      const bytes = await serializeGguf(m);
      const items = itemOffsets(bytes, "k");
      const bad = bytes.slice();
      bad[items[1]!] = 0xff; // item 1: not UTF-8
      const prefix = items[30]! - 8; // item 30: a length with a high word
      bad[littleEndian ? prefix + 7 : prefix] = 1;
      const direct = wholeParseError(bad);
      expect(direct).toMatchObject({ code: "STRING_TOO_LONG", offset: prefix });
      for (const initialChunk of [64, 100, 200, 300]) {
        await expect(readGguf({ ...bufferSource(bad) }, { initialChunk })).rejects.toMatchObject({ code: "STRING_TOO_LONG", offset: prefix });
      }
    }
  });
});
