import { createHash } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { archKey, fileTypeName, ggmlTypeName, GgufKeys, readGguf, summarize, type GgufModel, type GgufValue } from "@compat/gguf";
import type { PreparedModel } from "@compat/prepare";
import { ollamaTemplate, templateCapabilities, type OllamaTemplate } from "./ollama-template";

/** One served model as the Ollama API describes it. */
export interface ApiModel {
  /** The Ollama name (`gemma3:4b`), also the model's name in the router. */
  name: string;
  prepared: PreparedModel;
  /** Read from the manifest and the GGUF header on first use, then kept. */
  readonly facts: Promise<ModelFacts>;
  /** Resolves once llama-server can open the model's files (a mount plans a model on first use); rejects with why it cannot be served. */
  ready(): Promise<void>;
}

/** api.ModelDetails. */
interface ModelDetails {
  parent_model: string;
  format: string;
  family: string;
  families: string[] | null;
  parameter_size: string;
  quantization_level: string;
}

/** What /api/tags, /api/show and /api/ps say about a model, read once from its manifest and GGUF header. */
export interface ModelFacts {
  details: ModelDetails;
  /** sha256 of the manifest (what `ollama list` shows as ID). */
  digest: string;
  modifiedAt: Date;
  size: number;
  architecture: string;
  contextLength: number;
  /** model_info: every KV of the GGUF but general.name and the chat template; long arrays as []. */
  modelInfo: Record<string, unknown>;
  capabilities: string[];
  /** The template /api/show reports: Ollama's Go template layer, else the GGUF's chat template. */
  template: string;
  /** The chat template refuses two messages of one role in a row (gemma's "Conversation roles must alternate"). */
  alternating: boolean;
  /**
   * The Go template layer, parsed; undefined without one, or when Go would refuse it (Ollama
   * then logs it and gives it no capabilities).
   */
  goTemplate?: OllamaTemplate;
  /** The file llama-server loads has a chat template; without one, chats are rendered with the Go template. */
  servedHasChatTemplate: boolean;
  /** That chat template takes tools (Ollama's test: it names `tools` or `tool_call`). */
  chatTemplateTools: boolean;
}

export function apiModel(name: string, prepared: PreparedModel, ready: () => Promise<void> = async () => undefined): ApiModel {
  // Read when first asked, not at start: reading every model's header again as serve --all
  // starts kept the API from answering for as long (a header parse per model after "ready").
  let facts: Promise<ModelFacts> | undefined;
  return {
    name,
    prepared,
    get facts() {
      // the served file's chat template is read from it: once it is there
      return (facts ??= ready().then(() => readFacts(prepared)));
    },
    ready,
  };
}

async function readFacts(p: PreparedModel): Promise<ModelFacts> {
  const r = p.resolved;
  const manifest = r.manifestPath ? await readFile(r.manifestPath) : undefined;
  const modifiedAt = (await stat(r.manifestPath ?? r.modelPath)).mtime;
  const digest = manifest ? createHash("sha256").update(manifest).digest("hex") : (r.modelDigest ?? "").replace(/^sha256:/, "");
  let gguf: GgufModel;
  try {
    gguf = await readGguf(r.modelPath);
  } catch {
    // a file llama-server reads but our reader does not (a string that is not UTF-8): listed
    // all the same, with what the manifest says
    const details: ModelDetails = { parent_model: "", format: "gguf", family: "", families: null, parameter_size: "", quantization_level: "" };
    return { details, digest, modifiedAt, size: r.size, architecture: "", contextLength: 0, modelInfo: {}, capabilities: ["completion"], template: r.template ?? "", alternating: false, servedHasChatTemplate: true, chatTemplateTools: false };
  }
  try {
    const arch = gguf.getString(GgufKeys.ARCHITECTURE, "");
    const chatTemplate = gguf.tryGetString("tokenizer.chat_template") ?? "";
    const cfg = r.config ?? {};
    const str = (k: string) => (typeof cfg[k] === "string" ? (cfg[k] as string) : "");
    const family = str("model_family") || arch;
    const summary = summarize(gguf);
    const served = p.modelPath === r.modelPath ? chatTemplate : await servedChatTemplate(p.modelPath);
    const goTemplate = parsedTemplate(r.template);
    const details: ModelDetails = {
      parent_model: "",
      format: str("model_format") || "gguf",
      family,
      families: Array.isArray(cfg.model_families) ? (cfg.model_families as string[]) : family ? [family] : null,
      parameter_size: str("model_type") || humanCount(summary.parameterCount),
      quantization_level: str("file_type") || (summary.fileTypeId !== undefined ? (fileTypeName(summary.fileTypeId) ?? "unknown") : "unknown"),
    };
    return {
      details,
      digest,
      modifiedAt,
      size: r.size,
      architecture: arch,
      contextLength: gguf.tryGetNumber(archKey(arch, "context_length")) ?? 0,
      modelInfo: modelInfo(gguf, false),
      capabilities: capabilities(gguf, arch, p, chatTemplate, goTemplate),
      template: r.template ?? chatTemplate,
      alternating: /roles must alternate/i.test(served),
      goTemplate,
      servedHasChatTemplate: served !== "",
      chatTemplateTools: hasTools(served),
    };
  } finally {
    await gguf.close();
  }
}

/** A TEMPLATE layer parsed as Ollama parses it; one Go would refuse counts as none (Ollama warns and goes on). */
function parsedTemplate(text: string | undefined): OllamaTemplate | undefined {
  if (text === undefined || text === "") return undefined;
  try {
    return ollamaTemplate(text);
  } catch {
    return undefined;
  }
}

const hasTools = (chatTemplate: string) => chatTemplate.includes("tools") || chatTemplate.includes("tool_call");

/** The chat template of the file llama-server loads (a translation may have added one: gemma3's). */
async function servedChatTemplate(path: string): Promise<string> {
  try {
    const gguf = await readGguf(path);
    try {
      return gguf.tryGetString("tokenizer.chat_template") ?? "";
    } finally {
      await gguf.close();
    }
  } catch {
    return "";
  }
}

/** The GGUF's KVs as /api/show's model_info (Ollama drops general.name and the chat template; arrays over 5 items are [] unless verbose). */
function modelInfo(gguf: GgufModel, verbose: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of gguf.kvs()) {
    if (kv.key === GgufKeys.NAME || kv.key === "tokenizer.chat_template") continue;
    out[kv.key] = !verbose && typeof kv.value === "object" && kv.value.length > 5 ? [] : jsonValue(kv.value);
  }
  return out;
}

/** /api/show verbose's tensors. */
export async function tensorList(p: PreparedModel): Promise<{ info: Record<string, unknown>; tensors: Array<{ name: string; type: string; shape: number[] }> }> {
  const gguf = await readGguf(p.resolved.modelPath);
  try {
    return {
      info: modelInfo(gguf, true),
      tensors: gguf.tensors.map((t) => ({ name: t.name, type: ggmlTypeName(t.type).toUpperCase(), shape: t.shape.map(Number) })),
    };
  } finally {
    await gguf.close();
  }
}

function jsonValue(v: GgufValue): unknown {
  if (typeof v === "bigint") return Number(v);
  if (typeof v === "object") return v.toArray().map(jsonValue);
  return v;
}

/**
 * model.Capability values, as Ollama derives them (server/images.go): embedding or completion,
 * vision and audio (a tower in the file or a projector), tools and thinking from the chat
 * template, tools also from the Go template when its Vars name `tools` (Template.Vars: the
 * fields it reads, so `.Tools` and `$.Tools`), thinking also when the Go template shows the
 * tags around `.Thinking`, insert when the Go template reads `.Suffix` and the vocabulary has
 * fill-in-the-middle tokens (/infill needs them).
 */
function capabilities(gguf: GgufModel, arch: string, p: PreparedModel, chatTemplate: string, go: OllamaTemplate | undefined): string[] {
  const caps: string[] = [gguf.has(archKey(arch, "pooling_type")) ? "embedding" : "completion"];
  if (p.mmproj || gguf.has(archKey(arch, "vision.block_count"))) caps.push("vision");
  if (gguf.has(archKey(arch, "audio.block_count"))) caps.push("audio");
  const goCaps = go ? templateCapabilities(go) : [];
  if (hasTools(chatTemplate) || goCaps.includes("tools")) caps.push("tools");
  const fim = gguf.has("tokenizer.ggml.fim_pre_token_id") || gguf.has("tokenizer.ggml.prefix_token_id");
  if (fim && goCaps.includes("insert")) caps.push("insert");
  if (THINKING.test(chatTemplate) || goCaps.includes("thinking")) caps.push("thinking");
  return caps;
}

/**
 * A chat template that thinks: a `<think>` section, a switch for it (enable_thinking), a
 * reasoning level (reasoning_effort), or harmony's analysis channel (gpt-oss).
 */
const THINKING = /<think>[\s\S]*<\/think>|\benable_thinking\b|\breasoning_effort\b|<\|channel\|>analysis/;

/** 1234567890 → "1.2B", as Ollama's format.HumanNumber. */
function humanCount(n: number): string {
  const units: Array<[number, string]> = [
    [1e12, "T"],
    [1e9, "B"],
    [1e6, "M"],
    [1e3, "K"],
  ];
  for (const [size, unit] of units) {
    if (n >= size) {
      const v = n / size;
      return `${v >= 100 ? Math.round(v) : Number(v.toFixed(v >= 10 ? 1 : 2))}${unit}`;
    }
  }
  return String(n);
}

/** /api/show's `parameters`: one `key value` line per option of the params layer (Go's %-30s %#v). */
export function parametersText(params: Record<string, unknown>): string {
  const lines: string[] = [];
  for (const [k, v] of Object.entries(params)) for (const item of Array.isArray(v) ? v : [v]) lines.push(`${k.padEnd(30)} ${JSON.stringify(item)}`);
  return lines.join("\n");
}

/** /api/show's `modelfile`, as `ollama show --modelfile` prints it. */
export function modelfileText(name: string, p: PreparedModel): string {
  const r = p.resolved;
  const lines = ['# Modelfile generated by "ollama show"', "# To build a new Modelfile based on this, replace FROM with:", `# FROM ${name}`, "", `FROM ${r.modelPath}`];
  if (r.template !== undefined) lines.push(`TEMPLATE ${quote(r.template)}`);
  if (r.system !== undefined) lines.push(`SYSTEM ${quote(r.system)}`);
  for (const a of r.adapters) lines.push(`ADAPTER ${a}`);
  for (const [k, v] of Object.entries(r.params)) for (const item of Array.isArray(v) ? v : [v]) lines.push(`PARAMETER ${k} ${quote(String(item))}`);
  return lines.join("\n") + "\n";
}

/** parser.quote: multi-line or space-padded values in quotes, triple quotes when they hold one. */
function quote(s: string): string {
  if (!s.includes("\n") && !s.startsWith(" ") && !s.endsWith(" ")) return s;
  return s.includes('"') ? `"""${s}"""` : `"${s}"`;
}
