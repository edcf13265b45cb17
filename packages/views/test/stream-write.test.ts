// Both views of every fixture written from its bytes streamed once, in order, in chunks of any
// size (what `pull --to` does while downloading): the same bytes as the views' writeTo, and never
// more held in memory than the inputs of the most demanding op.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { ArrivingSource, GgufError, parseGguf, planStream, StreamWriter, type StreamOutput } from "@compat/gguf";
import type { TranslatedView } from "@compat/handlers";
import { allFixtureVariants, generateFixtureFiles } from "@compat/testkit";
import { openViews } from "@compat/views";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-stream-write-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The views of `bytes` parsed from a prefix only, their tensors reading an ArrivingSource. */
async function arrivingViews(bytes: Uint8Array) {
  for (let n = 1 << 12; ; n *= 2) {
    const head = bytes.subarray(0, Math.min(n, bytes.length));
    const source = new ArrivingSource("fixture", bytes.length, head);
    try {
      const model = parseGguf(head, "fixture", { source });
      return { head, source, views: await openViews(model) };
    } catch (e) {
      if (e instanceof GgufError && e.code === "TRUNCATED" && head.length < bytes.length) continue;
      throw e;
    }
  }
}

function outputsOf(views: { text: TranslatedView | null; mmproj: { kind: string; view?: TranslatedView } | null }): TranslatedView[] {
  return [views.text, views.mmproj?.kind === "view" ? views.mmproj.view! : null].filter((v): v is TranslatedView => v !== null);
}

/** Fixtures whose translation computes tensors: the held-memory bound is about them. */
const withOps: string[] = [];

describe("streamed writing of translated views", () => {
  const variants = allFixtureVariants();
  it.each(variants.map((v) => [`${v.arch} ${v.variant}`, v] as const))("%s: same bytes as writeTo, held memory bounded by one op's inputs", async (_label, v) => {
    const fx = await generateFixtureFiles(v.arch, { seed: 3, layout: "ollama", variant: v.variant }, join(dir, `${v.arch}-${v.variant}`));
    const bytes = new Uint8Array(await readFile(fx.text));
    // what translate writes
    const reference = await openViews(fx.text);
    const expected: Uint8Array[] = [];
    try {
      for (const [i, view] of outputsOf(reference).entries()) {
        const path = join(dir, `${v.arch}-${v.variant}-${i}.gguf`);
        await view.writeTo(path);
        expected.push(new Uint8Array(await readFile(path)));
      }
    } finally {
      await reference.close();
    }
    if (expected.length === 0) return; // native: nothing to translate
    // the plan alone bounds memory: by the op reading the most, whatever the chunks
    const probe = await arrivingViews(bytes);
    const plan = planStream(probe.source, outputsOf(probe.views).map((view): StreamOutput => ({ model: view.model, layout: view.layout })));
    expect(plan.peakHeldBytes).toBeLessThanOrEqual(plan.largestOpInputBytes);
    if (plan.ops.length > 0) withOps.push(`${v.arch} ${v.variant}`);
    await probe.views.close();

    await fc.assert(
      fc.asyncProperty(fc.array(fc.integer({ min: 1, max: Math.max(1, bytes.length) }), { minLength: 1, maxLength: 8 }), async (cuts) => {
        const { head, source, views } = await arrivingViews(bytes);
        try {
          const outs = outputsOf(views);
          const files = outs.map((view) => new Uint8Array(view.size));
          const writer = new StreamWriter(
            planStream(source, outs.map((view) => ({ model: view.model, layout: view.layout }))),
            files.map((f) => ({ write: async (at: number, b: Uint8Array) => void f.set(b, at) })),
            source,
          );
          await writer.start();
          await writer.feed(0, head);
          const points = [...new Set(cuts.filter((c) => c > head.length && c < bytes.length))].sort((a, b) => a - b);
          let at = head.length;
          for (const p of [...points, bytes.length]) {
            if (p > at) await writer.feed(at, bytes.slice(at, p)); // a copy: the writer must not keep what it is fed
            at = p;
          }
          expect(writer.done).toBe(true);
          expect(writer.maxHeldBytes).toBeLessThanOrEqual(writer.plan.largestOpInputBytes);
          files.forEach((f, i) => expect(Buffer.compare(f, expected[i]!), `output ${i}`).toBe(0));
        } finally {
          await views.close();
        }
      }),
      { numRuns: 3, seed: 38 },
    );
  }, 300_000);

  it("the fixtures above include translations with ops (F16 promotion, joins of gates, norm shifts)", () => {
    expect(withOps.length).toBeGreaterThan(5);
  });
});
