// One layout, four readers: for random models, the bytes the writer puts in a file, what the
// lazy view reads of any range and what a mount plan's extents describe are the same bytes,
// all taken from @compat/gguf's layoutGguf. No FUSE here: the plan is read back in JS.
import { readFile } from "node:fs/promises";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { GgmlType, GgufModel, readGguf, writeGguf, type GgufTensor } from "@compat/gguf";
import { TranslatedView, type TranslationReport } from "@compat/handlers";
import { planView, type ComputedPart, type FilePlan } from "@compat/mount";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

/** What becomes of one tensor of the source in the translated model. */
type Fate = "keep" | "bytes" | "computed" | "join" | "drop";

const tensorSpec = fc.record({
  length: fc.oneof(fc.nat({ max: 300 }), fc.integer({ min: 4000, max: 9000 })),
  fate: fc.constantFrom<Fate>("keep", "keep", "bytes", "computed", "join", "join", "drop"),
  seed: fc.nat({ max: 255 }),
});

const modelSpec = fc.record({
  alignment: fc.constantFrom(1, 8, 32, 64, 256),
  tensors: fc.array(tensorSpec, { maxLength: 12 }),
});

const fill = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed * 7 + 1) & 0xff);

/** The bytes a plan describes, read back: the header from memory, ranges of its sources, sidecars computed. */
async function planBytes(plan: FilePlan, computed: readonly ComputedPart[]): Promise<Uint8Array> {
  const out = new Uint8Array(plan.size);
  let at = 0;
  for (const x of plan.extents) {
    expect(x.at).toBe(at); // the extents tile the file
    if (x.kind === "memory") out.set(plan.memory.subarray(x.offset, x.offset + x.length), x.at);
    else if (x.kind === "source") out.set((await readFile(plan.sources[x.source]!.path)).subarray(x.offset, x.offset + x.length), x.at);
    else if (x.kind === "sidecar") {
      const part = computed.find((c) => c.path === plan.sidecars[x.sidecar]!.path)!;
      out.set((await part.produce()).subarray(x.offset, x.offset + x.length), x.at);
    }
    at += x.length;
  }
  expect(at).toBe(plan.size);
  return out;
}

describe("one layout for the writer, the lazy view and the mount plan", () => {
  it("the writer's bytes, view.read of any range and the plan's extents agree, for random models", async () => {
    const dir = await mkdtemp(join(tmpdir(), "compat-layout-"));
    dirs.push(dir);
    let run = 0;
    await fc.assert(
      fc.asyncProperty(modelSpec, fc.array(fc.tuple(fc.nat({ max: 1 << 16 }), fc.nat({ max: 1 << 14 })), { minLength: 1, maxLength: 8 }), async (spec, ranges) => {
        // the source: a GGUF file whose tensors are then file ranges of it
        const made = GgufModel.create();
        made.setString("general.architecture", "x");
        made.setU32("general.alignment", spec.alignment);
        spec.tensors.forEach((s, i) => made.addTensor({ name: `t${i}`, type: GgmlType.I8, shape: [s.length], data: { kind: "bytes", bytes: fill(s.length, s.seed) } }));
        const srcPath = join(dir, `src-${run}.gguf`);
        const outPath = join(dir, `out-${run}.gguf`);
        run++;
        await writeGguf(made, srcPath);
        const source = await readGguf(srcPath);
        try {
          // the translation: some tensors kept as ranges, some replaced by bytes or an op, some dropped
          const model = source.clone();
          model.setString("general.name", "translated");
          spec.tensors.forEach((s, i) => {
            const t = model.findTensor(`t${i}`)!;
            if (s.fate === "bytes") t.data = { kind: "bytes", bytes: fill(s.length, s.seed + 1) };
            if (s.fate === "computed") {
              const bytes = fill(s.length, s.seed + 2);
              t.data = { kind: "computed", length: s.length, label: "test op", produce: async () => bytes };
            }
            if (s.fate === "join" && t.data.kind === "range") {
              // an op that only joins bytes: the first half of its source range, then bytes in memory
              const half = s.length >> 1;
              const tail = fill(s.length - half, s.seed + 3);
              const head = { ...t.data, length: half };
              t.data = {
                kind: "computed",
                length: s.length,
                label: "test join",
                parts: [head, { kind: "bytes", bytes: tail }],
                produce: async () => Buffer.concat([await head.source.read(head.offset, half), tail]),
              };
            }
            if (s.fate === "drop") model.dropTensor(t.name);
          });
          const view = new TranslatedView(model, {} as TranslationReport, source);
          await view.writeTo(outPath);
          const written = new Uint8Array(await readFile(outPath));
          expect(written.length).toBe(view.size);

          // every layout extent in order, covering the file exactly
          let at = 0;
          for (const x of view.layout.extents) {
            expect(x.at).toBe(at);
            at += x.length;
          }
          expect(at).toBe(written.length);

          for (const [offset, length] of ranges) {
            const o = offset % (written.length + 10);
            expect(Buffer.compare(await view.read(o, length), written.subarray(o, o + length))).toBe(0);
          }

          const { plan, computed } = await planView(view, { sidecarPath: (t: GgufTensor, i) => join(dir, `${run}-${i}-${t.name}.bin`) });
          expect(Buffer.compare(await planBytes(plan, computed), written)).toBe(0);
          // a join is served from its pieces: only ops that compute get a sidecar
          expect(plan.sidecars.length).toBe(spec.tensors.filter((s) => s.fate === "computed" && s.length > 0).length);
        } finally {
          await source.close();
        }
      }),
      { numRuns: 60, seed: 36 },
    );
  });
});
