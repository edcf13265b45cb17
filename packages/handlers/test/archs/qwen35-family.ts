/**
 * What the qwen35 and qwen35moe proofs share: the twin options, the expected reference
 * gap, the MTP drafts llama-server logs, and the element-by-element checks of the byte-changing ops (norm +1, expert
 * stacking) against the Ollama source, independent F32 arithmetic and the native twin.
 */
import { readGguf, type GgufModel, type GgufTensor, readTensorData } from "@compat/gguf";
import type {  } from "@compat/handlers";
import { generateFixture, serverCompletion, startLlamaServer } from "@compat/testkit";
import { toF32 } from "@compat/tensor-ops";
import { expect } from "vitest";
import { NO_DIFFERENCES, proveHandler, type HandlerProof } from "../proof";
import type { TwinDifferences, TwinOptions } from "../twin";

export const MTP_BLOCK = 2;

/** The MTP layer's own RMSNorm gains: Ollama's writer already added 1, the reference adds another. */
export const MTP_LAYER_NORMS = ["attn_norm", "post_attention_norm", "attn_q_norm", "attn_k_norm"].map((n) => `blk.${MTP_BLOCK}.${n}.weight`);

/** The MTP head's norms: stored as Hugging Face offsets, the +1 is right for them. */
export const MTP_HEAD_NORMS: ReadonlyArray<readonly [ollama: string, native: string]> = [
  ["mtp.pre_fc_norm_embedding.weight", `blk.${MTP_BLOCK}.nextn.enorm.weight`],
  ["mtp.pre_fc_norm_hidden.weight", `blk.${MTP_BLOCK}.nextn.hnorm.weight`],
  ["mtp.norm.weight", `blk.${MTP_BLOCK}.nextn.shared_head_norm.weight`],
];

/** The norm +1 ops of the MTP block (both archs), as `<tensor> <- <label>`. */
export const MTP_NORM_SHIFTS = ["attn_k_norm", "attn_norm", "attn_q_norm", "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm", "post_attention_norm"].map(
  (n) => `blk.${MTP_BLOCK}.${n}.weight <- F32 norm +1`,
);

export function twinOptions(moe: boolean, mtp: boolean, extraLayout: readonly string[] = []): TwinOptions {
  const blocks = mtp ? [0, 1, MTP_BLOCK] : [0, 1];
  return {
    ignoreKeys: [
      // unused: for this pre-tokenizer llama.cpp defaults add_bos to false, as the native file states
      "tokenizer.ggml.bos_token_id",
      "tokenizer.ggml.add_bos_token",
    ],
    // Ollama wrote the shared-expert gate F16, llama.cpp's converter F32 (same [n_embd, 1]); llama.cpp takes both
    layoutMayDiffer: [...(moe ? blocks.map((b) => `blk.${b}.ffn_gate_inp_shexp.weight`) : []), ...extraLayout],
  };
}

/** Reference gap: the MTP layer norms come out as native + 1 (see findings.md). */
export function expectedDiff(mtp: boolean): TwinDifferences {
  return { ...NO_DIFFERENCES, data: mtp ? [...MTP_LAYER_NORMS].sort() : [] };
}

async function f32Of(t: GgufTensor): Promise<Float32Array> {
  return toF32(t.type, await readTensorData(t), t.shape.reduce((a, b) => a * b, 1));
}

function tensorOf(m: GgufModel, name: string): GgufTensor {
  const t = m.findTensor(name);
  if (t === undefined) throw new Error(`no tensor ${name}`);
  return t;
}

/**
 * The byte-changing ops, element by element: every shifted norm is F32 and equals the
 * Ollama value + 1 done here in F32; the head norms then equal the native twin, the layer
 * norms native + 1. Each stacked expert tensor holds the Ollama experts in order, and
 * equals the native stack.
 */
export async function expectMtpOpsElementwise(
  p: HandlerProof,
  arch: string,
  fixture: { variant: string; seed: number; sourceDtype?: "f16" | "bf16" },
  moe: boolean,
): Promise<void> {
  const source = generateFixture(arch, { ...fixture, layout: "ollama" }).text;
  const out = await readGguf(p.outPath);
  try {
    const native = p.native.text;
    const shifted: Array<[ollama: string, translated: string, nativeOffset: number]> = [
      ...MTP_HEAD_NORMS.map(([o, n]) => [o, n, 0] as [string, string, number]),
      ...MTP_LAYER_NORMS.map((n) => [`mtp.layers.0.${n.slice(`blk.${MTP_BLOCK}.`.length)}`, n, 1] as [string, string, number]),
    ];
    for (const [from, to, nativeOffset] of shifted) {
      const t = tensorOf(out, to);
      expect(t.type, `${to} is F32`).toBe(0);
      const got = await f32Of(t);
      const src = await f32Of(tensorOf(source, from));
      const nat = await f32Of(tensorOf(native, to));
      expect(got.length).toBe(src.length);
      for (let i = 0; i < got.length; i++) {
        expect(got[i], `${to}[${i}] = ${from}[${i}] + 1`).toBe(Math.fround(src[i]! + 1));
        expect(got[i], `${to}[${i}] vs native`).toBe(Math.fround(nat[i]! + nativeOffset));
      }
    }
    if (!moe) return;
    for (const proj of ["gate", "up", "down"]) {
      const name = `blk.${MTP_BLOCK}.ffn_${proj}_exps.weight`;
      const t = tensorOf(out, name);
      const got = await f32Of(t);
      const nat = await f32Of(tensorOf(native, name));
      expect(t.shape, name).toEqual(tensorOf(native, name).shape);
      const nExpert = t.shape[2]!;
      const slab = t.shape[0]! * t.shape[1]!;
      for (let e = 0; e < nExpert; e++) {
        const src = await f32Of(tensorOf(source, `mtp.layers.0.mlp.experts.${e}.${proj}_proj.weight`));
        expect(Array.from(got.subarray(e * slab, (e + 1) * slab)), `${name} expert ${e} = Ollama expert ${e}`).toEqual(Array.from(src));
      }
      expect(Array.from(got), `${name} = native`).toEqual(Array.from(nat));
    }
  } finally {
    await out.close();
  }
}

/**
 * The MTP head really loads and drafts: llama-server (built from the same llama.cpp) with
 * `--spec-type draft-mtp`, as Ollama launches these models, builds its MTP draft context on
 * block 2 (shapes checked, which a plain load skips) and drafts tokens during a completion.
 */
export async function expectMtpDrafts(model: string): Promise<void> {
  const server = await startLlamaServer({ model, args: ["--spec-type", "draft-mtp"] });
  try {
    const { tokens, raw } = await serverCompletion(server, { prompt: "Hello", nPredict: 8 });
    expect(tokens).toHaveLength(8);
    expect(server.logs()).toMatch(/creating MTP draft context/);
    const timings = raw.timings as { draft_n?: number } | undefined;
    expect(timings?.draft_n ?? 0, "tokens drafted by the MTP head").toBeGreaterThan(0);
  } finally {
    await server.stop();
  }
}

/** One draft step of the MTP head: the position, its top candidates (most likely first) with their probabilities. */
export interface DraftStep {
  pos: number;
  candidates: Array<[token: number, p: number]>;
}

/**
 * Asserts two draft lists agree (or not). Agreeing: the same chosen tokens (candidate 0) on
 * what both drafted (how many draft rounds a completion runs varies from run to run, the
 * tokens each round drafts do not). Disagreeing must show in what the head computes, not in
 * a near-tie between two tokens: at the first draft step, where both heads see the same
 * prompt and the same trunk, some candidate's probability differs by more than 0.01 (a
 * token missing from one top list counts as 0 there). llama.cpp prints three decimals, so
 * rounding moves a probability by 0.001 at most, and a swapped near-tie by about that.
 */
export function expectDraftsAgree(a: readonly DraftStep[], b: readonly DraftStep[], agree = true): void {
  const n = Math.min(a.length, b.length);
  expect(n).toBeGreaterThanOrEqual(3);
  const chosen = (d: readonly DraftStep[]) => d.slice(0, n).map((s) => `pos ${s.pos}: ${s.candidates[0]![0]}`);
  if (agree) return expect(chosen(a)).toEqual(chosen(b));
  const pa = new Map(a[0]!.candidates);
  const pb = new Map(b[0]!.candidates);
  const moved = [...new Set([...pa.keys(), ...pb.keys()])].map((t) => Math.abs((pa.get(t) ?? 0) - (pb.get(t) ?? 0)));
  expect(Math.max(...moved), `largest change of a first-step candidate's probability (${JSON.stringify([...pa])} vs ${JSON.stringify([...pb])})`).toBeGreaterThan(0.01);
}

/**
 * What the MTP head drafts, as llama-server logs it with `--verbose` under
 * `--spec-type draft-mtp`: every draft step's top candidates (llama.cpp logs three) and their
 * probabilities. Agreement is judged on the chosen token only: near-ties among the lower
 * candidates can swap with last-bit differences the twin comparison allows (e.g. the MoE's
 * F16 vs F32 shared-expert gate). With toy weights the trunk accepts no draft, so the drafts
 * themselves show how the head computes.
 */
export async function mtpDraftCandidates(model: string): Promise<DraftStep[]> {
  const server = await startLlamaServer({ model, args: ["--spec-type", "draft-mtp", "--verbose"] });
  try {
    await serverCompletion(server, { prompt: "Hello", nPredict: 8 });
    const drafts = () => {
      const steps: DraftStep[] = [];
      for (const line of server.logs().split("\n")) {
        const m = /draft candidate\s+(\d+), pos\s+(\d+):\s+(\d+) \(\s*([\d.]+)\)/.exec(line);
        if (!m) continue;
        const candidate: [number, number] = [Number(m[3]), Number(m[4])];
        if (m[1] === "0") steps.push({ pos: Number(m[2]), candidates: [candidate] });
        else steps.at(-1)?.candidates.push(candidate);
      }
      return steps;
    };
    // llama.cpp's log is written by a thread of its own, so it can trail the HTTP answer by as
    // long as a loaded machine keeps that thread waiting: read it once it shows the slot's
    // release, which the same thread logs after every draft of the completion.
    for (let i = 0; i < 1200 && !server.logs().includes("stop processing"); i++) await new Promise((r) => setTimeout(r, 50));
    expect(server.logs(), "llama-server's log never showed the completion's end").toContain("stop processing");
    return drafts();
  } finally {
    await server.stop();
  }
}

type Qwen35Arch = "qwen35" | "qwen35moe";

export interface Qwen35Case {
  variant: string;
  sourceDtype: "f16" | "bf16";
  mtp: boolean;
  /** The detector's markers. */
  markers: readonly string[];
  /** The ops of the report, as `<tensor> <- <label>`. */
  ops: readonly string[];
  /** Tensors whose layout may differ from the twin's beyond twinOptions'. */
  layout?: readonly string[];
}

/**
 * One reference-profile case of either arch: the markers and the kept gap, v./mm./mtp.
 * hidden, real llama.cpp loads the output, the twin differs only by the gap, the source is
 * untouched, the twin (when loaded) generates the same tokens and its MTP head drafts;
 * the ops are the expected ones and, with an MTP head, correct element by element and
 * drafting in llama-server.
 */
export async function proveQwen35Reference(dir: string, arch: Qwen35Arch, seed: number, c: Qwen35Case, loadTwin: boolean): Promise<HandlerProof> {
  const moe = arch === "qwen35moe";
  const { variant, sourceDtype, mtp } = c;
  const p = await proveHandler(dir, arch, { seed, variant, sourceDtype, twin: twinOptions(moe, mtp, c.layout), nativeTwin: { load: loadTwin }, profile: "reference" });
  expect(p.view.report.handlers).toEqual([{ name: arch, markers: c.markers }]);
  expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(mtp ? [`${arch}-mtp-norms-once`] : []);
  expect(p.translatedModel.tensors.some((t) => /^(v|mm|mtp)\./.test(t.name))).toBe(false);
  expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
  expect({ ...p.diff, data: [...p.diff.data].sort() }).toEqual(expectedDiff(mtp));
  expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  if (p.twin?.load) {
    expect(p.twin.load.ok ? p.twin.load.tokens.length : p.twin.load.error).toBeGreaterThan(0);
    // the trunk is the native one, so greedy decoding agrees token for token
    if (p.load.ok && p.twin.load.ok) expect(p.load.tokens).toEqual(p.twin.load.tokens);
  }
  // the native twin's MTP head drafts the same way
  if (p.twin?.load && mtp) await expectMtpDrafts(p.twin.paths.text);
  expect(p.view.report.ops.map((o) => `${o.tensor} <- ${o.label}`).sort()).toEqual([...c.ops].sort());
  if (mtp) {
    await expectMtpOpsElementwise(p, arch, { variant, seed, sourceDtype }, moe);
    await expectMtpDrafts(p.outPath);
  }
  return p;
}

/**
 * The native profile (<arch>-mtp-norms-once): the MTP layer norms equal the twin's, so
 * nothing differs from it; llama-server's MTP head drafts the twin's tokens, while that of
 * `referenceOut` (the reference profile's output of the same variant) drafts others.
 */
export async function expectNativeProfile(p: HandlerProof, arch: Qwen35Arch, referenceOut: string | undefined): Promise<void> {
  expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([[arch, `${arch}-mtp-norms-once`]]);
  expect(p.diff).toEqual(NO_DIFFERENCES);
  for (const n of MTP_LAYER_NORMS) expect(p.translatedModel.findTensor(n)?.type, n).toBe(0);
  if (p.load.ok && p.twin!.load!.ok) expect(p.load.tokens).toEqual(p.twin!.load!.tokens);
  const twin = await mtpDraftCandidates(p.twin!.paths.text);
  expect(twin.length).toBeGreaterThan(0);
  expectDraftsAgree(await mtpDraftCandidates(p.outPath), twin);
  if (referenceOut === undefined) throw new Error(`run with the reference-profile test of the same ${arch} variant`);
  expectDraftsAgree(await mtpDraftCandidates(referenceOut), twin, false);
}
