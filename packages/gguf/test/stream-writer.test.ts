// planStream / StreamWriter on hand-made models: what is held and when, and the refusals.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ArrivingSource, GgmlType, GgufError, GgufModel, layoutGguf, planStream, serializeGguf, StreamWriter, type ComputedData, type GgufTensor, type RangeData } from "../src/index";

const SIZE = 4096;
const sourceBytes = Uint8Array.from({ length: SIZE }, (_, i) => (i * 7 + 3) & 0xff);

function range(source: ArrivingSource, offset: number, length: number): RangeData {
  return { kind: "range", source, offset, length };
}

/** An op adding 1 to every byte of its inputs laid side by side, reading them through the source. */
function plusOne(inputs: RangeData[]): ComputedData {
  const length = inputs.reduce((s, r) => s + r.length, 0);
  return {
    kind: "computed",
    length,
    label: "+1",
    inputs,
    async produce() {
      const out = new Uint8Array(length);
      let at = 0;
      for (const r of inputs) {
        out.set((await r.source.read(r.offset, r.length)).map((b) => (b + 1) & 0xff), at);
        at += r.length;
      }
      return out;
    },
  };
}

function model(tensors: GgufTensor[]): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "test");
  for (const t of tensors) m.addTensor(t);
  return m;
}

async function streamed(m: GgufModel, source: ArrivingSource, chunk: number) {
  const layout = layoutGguf(m);
  const plan = planStream(source, [{ model: m, layout }]);
  const out = new Uint8Array(layout.totalSize);
  const writer = new StreamWriter(plan, [{ write: async (at, b) => void out.set(b, at) }], source);
  await writer.start();
  for (let at = 0; at < SIZE; at += chunk) await writer.feed(at, sourceBytes.slice(at, Math.min(SIZE, at + chunk)));
  return { plan, writer, out };
}

/** The same model over the source's bytes in memory, serialized by the ordinary writer. */
async function expected(build: (s: ArrivingSource) => GgufModel): Promise<Uint8Array> {
  const whole = new ArrivingSource("whole", SIZE, sourceBytes);
  return serializeGguf(build(whole));
}

describe("planStream / StreamWriter", () => {
  const build = (s: ArrivingSource) =>
    model([
      { name: "a", type: GgmlType.I8, shape: [512], data: range(s, 0, 512) },
      { name: "b", type: GgmlType.I8, shape: [1024], data: plusOne([range(s, 1024, 512), range(s, 1536, 512)]) },
      { name: "c", type: GgmlType.I8, shape: [256], data: { kind: "bytes", bytes: new Uint8Array(256).fill(9) } },
      { name: "d", type: GgmlType.I8, shape: [512], data: plusOne([range(s, 3072, 512)]) },
    ]);

  it("places ranges, runs each op once its inputs arrived, and holds one op's inputs at most, whatever the chunk size", async () => {
    const want = await expected(build);
    for (const chunk of [1, 100, 512, 4096]) {
      const source = new ArrivingSource("s", SIZE);
      const { plan, writer, out } = await streamed(build(source), source, chunk);
      expect(plan.largestOpInputBytes).toBe(1024);
      expect(plan.peakHeldBytes).toBe(1024);
      expect(writer.done).toBe(true);
      expect(writer.maxHeldBytes).toBe(1024);
      expect(writer.heldBytes).toBe(0);
      expect(Buffer.compare(out, want), `chunk ${chunk}`).toBe(0);
    }
  });

  it("ops whose inputs interleave: the plan says the larger peak before a byte arrives, and the writer keeps to it", async () => {
    const interleaved = (s: ArrivingSource) =>
      model([
        { name: "x", type: GgmlType.I8, shape: [1024], data: plusOne([range(s, 0, 512), range(s, 2048, 512)]) },
        { name: "y", type: GgmlType.I8, shape: [1024], data: plusOne([range(s, 1024, 512), range(s, 3072, 512)]) },
      ]);
    const source = new ArrivingSource("s", SIZE);
    const { plan, writer, out } = await streamed(interleaved(source), source, 256);
    expect(plan.largestOpInputBytes).toBe(1024);
    expect(plan.peakHeldBytes).toBe(1536); // x's first half, y's first half and x's second half at once
    expect(writer.maxHeldBytes).toBe(1536);
    expect(Buffer.compare(out, await expected(interleaved))).toBe(0);
  });

  it("a stream stopped where it was settled and continued by another writer (resumeAt) writes the same bytes; one stopped inside an op's inputs is refused", async () => {
    const want = await expected(build);
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 700 }), fc.integer({ min: 0, max: 40 }), fc.integer({ min: 1, max: 700 }), async (chunk, stopAfter, chunk2) => {
        // the first writer: its writes land in `out`, and it stops after some chunks where it holds nothing
        const first = new ArrivingSource("s", SIZE);
        const m = build(first);
        const layout = layoutGguf(m);
        const out = new Uint8Array(layout.totalSize).fill(0xee); // what a stop leaves past the recorded prefix is rewritten, whatever it is
        let n = 0;
        const writes: Array<{ n: number; at: number; length: number }> = [];
        const a = new StreamWriter(planStream(first, [{ model: m, layout }]), [{ write: async (at, b) => void (out.set(b, at), writes.push({ n, at, length: b.length })) }], first);
        await a.start();
        let stop = 0;
        let stopN = 0;
        for (let at = 0; at < SIZE && n < stopAfter; at += chunk) {
          n++;
          await a.feed(at, sourceBytes.slice(at, Math.min(SIZE, at + chunk)));
          if (a.settled) [stop, stopN] = [a.position, n];
        }
        // a kill loses (or garbles) whatever was written after the last settled point
        for (const w of writes) if (w.n > stopN) out.fill(0xee, w.at, w.at + w.length);
        // the second writer, on a fresh plan of the same model, from `stop`
        const second = new ArrivingSource("s", SIZE);
        const m2 = build(second);
        const b = new StreamWriter(planStream(second, [{ model: m2, layout: layoutGguf(m2) }]), [{ write: async (at, x) => void out.set(x, at) }], second);
        b.resumeAt(stop);
        await b.start();
        for (let at = stop; at < SIZE; at += chunk2) await b.feed(at, sourceBytes.slice(at, Math.min(SIZE, at + chunk2)));
        expect(b.done).toBe(true);
        expect(Buffer.compare(out, want)).toBe(0);
      }),
      { numRuns: 60 },
    );
    const s = new ArrivingSource("s", SIZE);
    const m = build(s);
    // 1200 is inside b's inputs (1024-2048), which the op needs whole
    expect(() => new StreamWriter(planStream(s, [{ model: m, layout: layoutGguf(m) }]), [{ write: async () => undefined }], s).resumeAt(1200)).toThrow(GgufError);
  });

  it("refuses what it cannot stream: an op that does not declare its inputs, another source, bytes fed out of order", async () => {
    const source = new ArrivingSource("s", SIZE);
    const blind: ComputedData = { kind: "computed", length: 4, label: "blind", produce: async () => new Uint8Array(4) };
    const m = model([{ name: "z", type: GgmlType.I8, shape: [4], data: blind }]);
    expect(() => planStream(source, [{ model: m, layout: layoutGguf(m) }])).toThrow(GgufError);
    const other = new ArrivingSource("other", SIZE);
    const m2 = model([{ name: "w", type: GgmlType.I8, shape: [4], data: range(other, 0, 4) }]);
    expect(() => planStream(source, [{ model: m2, layout: layoutGguf(m2) }])).toThrow(/reads other, not the streamed s/);
    const m3 = build(source);
    const writer = new StreamWriter(planStream(source, [{ model: m3, layout: layoutGguf(m3) }]), [{ write: async () => undefined }], source);
    await writer.start();
    await expect(writer.feed(10, sourceBytes.subarray(10, 20))).rejects.toMatchObject({ code: "NOT_ARRIVED" });
    // a read of bytes nobody holds is a typed error, never stale bytes
    await expect(source.read(3000, 10)).rejects.toMatchObject({ code: "NOT_ARRIVED" });
  });
});
