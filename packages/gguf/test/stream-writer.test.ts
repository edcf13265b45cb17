// planStream / StreamWriter on hand-made models: what is held and when, and the refusals.
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
