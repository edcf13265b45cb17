import { GgmlType, GgufValueType, type GgufModel } from "@compat/gguf";
import { addScalar, canConvertToF32, fromF32, stack, stackPieces, toF32 } from "@compat/tensor-ops";
import type { Translation } from "../translation";
import { arrayKv, hasTensorPrefix, tensorNames, u32Kv } from "../reads";
import { anyOf, kvMarkers } from "../markers";

/**
 * What qwen35 and qwen35moe share: Ollama's Qwen 3.5 converter (the revision that kept
 * the MTP head under its Hugging Face `mtp.` names) wrote per-layer head_count_kv, three
 * M-RoPE sections, the dt bias without ".bias", the vision tower in the same file, and
 * the MTP head as `mtp.*` tensors. llama.cpp wants the MTP head as one more block
 * (`blk.<n_layer>.*`, `nextn_predict_layers`), with the +1 baked into its norms.
 */

/** Markers of an Ollama-written file; llama.cpp's converter writes none of them. */
export function detectQwen35(m: GgufModel, p: string, extraKeys: readonly string[] = []): string[] | null {
  const keys = [`${p}.vision.block_count`, `${p}.image_token_id`, `${p}.ssm.v_head_reordered`, ...extraKeys, `${p}.rope.mrope_interleaved`];
  return anyOf(
    ...kvMarkers(m, keys),
    hasTensorPrefix(m, "mtp.") && "embedded MTP tensors mtp.*",
    hasTensorPrefix(m, "v.") && "embedded vision tensors v.*",
  );
}

export function applyQwen35TextFixes(t: Translation, p: string): void {
  // head_count_kv per layer (0 on linear-attention layers) -> the attention layers' count.
  t.collapseArrayToMax(`${p}.attention.head_count_kv`, 2);
  padSectionsToFour(t, `${p}.rope.dimension_sections`);
  t.renameTensorSuffix(".ssm_dt", ".ssm_dt.bias");
  translateMtp(t, p);
  // The vision tower and projector go to the clip view; MTP tensors left over were not translatable.
  t.hide("v.");
  t.hide("mm.");
  t.hide("mtp.");
}

/** llama.cpp reads four M-RoPE sections; Ollama wrote three. Items are taken as i32, as the reference reads them. */
function padSectionsToFour(t: Translation, key: string): void {
  const items = arrayKv(t.draft, key)?.toArray();
  if (items === undefined) return;
  if (items.length !== 3) return;
  const asI32 = items.map((v) => (typeof v === "bigint" ? Number(BigInt.asIntN(32, v)) : typeof v === "number" ? v | 0 : 0));
  t.setArray(key, GgufValueType.INT32, [...asI32, 0]);
}

const MTP_LAYER = /^mtp\.layers\.(\d+)\.(.+)$/;
const BLOCK = /^blk\.(\d+)\./;

/** The MTP head's tensors shared by all MTP layers, and their llama.cpp names under block `base`. */
const SHARED_HEADS: ReadonlyArray<readonly [from: string, to: string]> = [
  ["mtp.fc.weight", "nextn.eh_proj.weight"],
  ["mtp.pre_fc_norm_embedding.weight", "nextn.enorm.weight"],
  ["mtp.pre_fc_norm_hidden.weight", "nextn.hnorm.weight"],
  ["mtp.embed_tokens.weight", "nextn.embed_tokens.weight"],
  ["mtp.shared_head.head.weight", "nextn.shared_head_head.weight"],
  ["mtp.shared_head.norm.weight", "nextn.shared_head_norm.weight"],
  // only when shared_head.norm did not already give it
  ["mtp.norm.weight", "nextn.shared_head_norm.weight"],
];

/** MTP layers: 1 + the largest X of `mtp.layers.X.<suffix>`, 1 for an `mtp.` head without layers, 0 without `mtp.`. */
function mtpLayerCount(names: readonly string[]): number {
  let max = -1;
  let any = false;
  for (const name of names) {
    if (!name.startsWith("mtp.")) continue;
    any = true;
    const m = MTP_LAYER.exec(name);
    if (m) max = Math.max(max, Number(m[1]));
  }
  return max >= 0 ? max + 1 : any ? 1 : 0;
}

/** Trunk layers: 1 + the largest block index of a `blk.N.` tensor, else the block_count KV. */
function trunkBlockCount(t: Translation, names: readonly string[], p: string): number {
  let max = -1;
  for (const name of names) {
    const m = BLOCK.exec(name);
    if (m) max = Math.max(max, Number(m[1]));
  }
  if (max >= 0) return max + 1;
  return u32Kv(t.draft, `${p}.block_count`) ?? 0;
}

function translateMtp(t: Translation, p: string): void {
  const names = tensorNames(t.draft);
  const nextn = mtpLayerCount(names);
  if (nextn === 0) return;
  // A file that already has llama.cpp's MTP names needs nothing.
  if (names.some((n) => n.startsWith("blk.") && n.includes(".nextn."))) return;
  const base = trunkBlockCount(t, names, p);
  if (base === 0) return; // nothing to append to; the mtp.* tensors stay hidden
  t.setU32(`${p}.nextn_predict_layers`, nextn);
  t.setU32(`${p}.block_count`, base + nextn);

  // Ollama's writer already added the 1 to the MTP layer's own `_norm.weight`s; the reference adds it again
  let shiftOnce = false;
  t.fix({
    name: `${p}-mtp-norms-once`,
    reason:
      "Ollama's legacy writer (convert_qwen3next.go addOne) already stored the MTP layer's own RMSNorm gains + 1 and the reference adds 1 again on rename, so llama.cpp's MTP draft head runs with norms one too high; llama.cpp's converter adds the 1 once",
    needed: () => !shiftOnce && names.some((n) => MTP_LAYER.test(n) && ollamaShifted(n)),
    apply: () => {
      shiftOnce = true;
    },
  });

  const moe = p === "qwen35moe";
  if (moe) for (let i = 0; i < nextn; i++) stackMtpExperts(t, i, base + i);

  for (const name of names) {
    const m = MTP_LAYER.exec(name);
    if (!m || Number(m[1]) >= nextn) continue;
    const suffix = m[2]!;
    if (moe && suffix.startsWith("mlp.experts.")) continue; // stacked above; leftovers stay hidden
    renameMtpTensor(t, name, `blk.${base + Number(m[1])}.${suffix}`, shiftOnce && ollamaShifted(name));
  }

  // The shared head belongs to one block; with several MTP layers the reference leaves it out (hidden).
  if (nextn !== 1) return;
  for (const [from, to] of SHARED_HEADS) renameMtpTensor(t, from, `blk.${base}.${to}`);
}

/**
 * Destinations the reference gives llama.cpp's RMSNorm +1. Right for the head's norms, which
 * Ollama wrote as raw offsets; the MTP layer's `_norm.weight` already had the +1 from Ollama's
 * writer and end up one too high under `reference` (`native` skips those: `<arch>-mtp-norms-once`).
 */
function needsNormShift(name: string): boolean {
  if (name.endsWith(".ssm_norm.weight")) return false;
  return name.endsWith("_norm.weight") || name.endsWith(".nextn.enorm.weight") || name.endsWith(".nextn.hnorm.weight");
}

/** Names Ollama's legacy writer gave the +1 (`addOne`: every `_norm.weight` but `.ssm_norm.weight`). */
function ollamaShifted(name: string): boolean {
  return name.endsWith("_norm.weight") && !name.endsWith(".ssm_norm.weight");
}

/**
 * Renames an MTP tensor unless the source is missing or the destination taken; norms become
 * F32 gain + 1 (F32 as they are when `alreadyShifted`, the native profile's fix).
 */
function renameMtpTensor(t: Translation, from: string, to: string, alreadyShifted = false): void {
  if (!t.draft.hasTensor(from) || t.draft.hasTensor(to)) return;
  t.renameTensor(from, to);
  if (!needsNormShift(to)) return;
  const src = t.draft.findTensor(to)!;
  const count = src.shape.reduce((a, b) => a * b, 1);
  if (alreadyShifted && src.type === GgmlType.F32) return;
  t.op(to, {
    label: alreadyShifted ? "F32 norm" : "F32 norm +1",
    inputs: [to],
    type: GgmlType.F32,
    shape: src.shape,
    compute: ([x]) => {
      const f = new Uint8Array(toF32(x!.type, x!.bytes, count).buffer);
      return alreadyShifted ? f : addScalar(GgmlType.F32, f, 1);
    },
  });
}

/**
 * Whether a stack of MTP experts of more than one type is made (widened to F32). The
 * reference refuses it (an error in its log; the experts stay hidden, the MTP block is
 * incomplete and llama.cpp rejects the file: missing tensor blk.<n>.ffn_*_exps.weight).
 * Widening keeps every value, so `native` stacks them (the named fix).
 */
function stacksMixedExperts(t: Translation, convertible: boolean): boolean {
  let stack = false;
  t.fix({
    name: "qwen35moe-mtp-mixed-experts-f32",
    reason:
      "the reference refuses to stack MTP experts (mtp.layers.<i>.mlp.experts.<e>.*) of different types, so the MTP block misses its expert tensors and llama.cpp rejects the file; widened to F32 they stack with every value kept",
    needed: () => convertible,
    apply: () => {
      stack = true;
    },
  });
  return stack;
}

const EXPERT_PROJECTIONS: ReadonlyArray<readonly [from: string, to: string]> = [
  ["gate_proj.weight", "ffn_gate_exps.weight"],
  ["up_proj.weight", "ffn_up_exps.weight"],
  ["down_proj.weight", "ffn_down_exps.weight"],
];

/**
 * MTP layer `i`'s per-expert matrices `mtp.layers.i.mlp.experts.E.<proj>` stacked (expert
 * order) into `blk.<block>.ffn_<proj>_exps.weight`. Experts must be exactly 0..n-1 and 2-D
 * of one shape. The first expert's tensor becomes the destination; the others keep their
 * `mtp.` names and are hidden.
 */
function stackMtpExperts(t: Translation, i: number, block: number): void {
  const prefix = `mtp.layers.${i}.mlp.experts.`;
  for (const [proj, dest] of EXPERT_PROJECTIONS) {
    const experts: Array<{ e: number; name: string }> = [];
    for (const name of tensorNames(t.draft)) {
      if (!name.startsWith(prefix)) continue;
      const m = /^(\d+)\.(.+)$/.exec(name.slice(prefix.length));
      if (m && m[2] === proj) experts.push({ e: Number(m[1]), name });
    }
    if (experts.length === 0) continue;
    experts.sort((a, b) => a.e - b.e);
    if (experts.some((x, k) => x.e !== k)) continue; // the reference refuses a gap; they stay hidden
    const tensors = experts.map((x) => t.draft.findTensor(x.name)!);
    const [ne0, ne1] = tensors[0]!.shape;
    const is2d = (s: readonly number[]) => s.length <= 2 || s.slice(2).every((d) => d === 1);
    if (!tensors.every((x) => is2d(x.shape) && x.shape[0] === ne0 && (x.shape[1] ?? 1) === (ne1 ?? 1))) continue;
    const type = tensors[0]!.type;
    const mixed = tensors.some((x) => x.type !== type);
    if (mixed && !stacksMixedExperts(t, tensors.every((x) => canConvertToF32(x.type)))) continue;
    const outType = mixed ? GgmlType.F32 : type;
    const dest2d = [ne0!, ne1 ?? 1];
    const destName = `blk.${block}.${dest}`;
    if (t.draft.hasTensor(destName)) continue;
    const names = experts.map((x) => x.name);
    t.renameTensor(names[0]!, destName);
    const elements = ne0! * (ne1 ?? 1);
    const spec = { label: mixed ? "stack experts (promoted to F32)" : "stack experts", inputs: [destName, ...names.slice(1)], type: outType, shape: [...dest2d, names.length] };
    if (!mixed) t.op(destName, { ...spec, join: stackPieces(names.map(() => dest2d), outType).pieces }); // the experts' bytes one after another
    else t.op(destName, { ...spec, compute: (parts) => stack(parts.map((x) => ({ data: fromF32(outType, toF32(x.type, x.bytes, elements)), shape: dest2d })), outType).data });
  }
}
