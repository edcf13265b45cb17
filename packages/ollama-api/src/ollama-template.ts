import { executeGoTemplate, GoFloat, goJson, GoMap, GoStruct, nilSlice, parseGoTemplate, templateVars, thinkingTags, toolCallTag, type GoSlice, type Node, type ParsedTemplate, type PipeNode } from "./go-template";

/**
 * A model's TEMPLATE layer as Ollama uses it (template/template.go): parsed once, its Vars
 * (the capabilities it gives), the tag that opens a tool call in the model's output, and the
 * prompt it renders for a conversation.
 */
export interface OllamaTemplate {
  parsed: ParsedTemplate;
  /** Template.Vars; undefined where Ollama's Vars fails ({{template}} without a pipeline), which gives no capabilities. */
  vars: string[] | undefined;
  toolTag: string;
  thinking: [string, string];
}

/** Parses a TEMPLATE layer (GoTemplateError when Go would refuse it), adding `{{ .Response }}` where Ollama's Parse does. */
export function ollamaTemplate(text: string): OllamaTemplate {
  const parsed = parseGoTemplate(text);
  let vars: string[] | undefined;
  try {
    vars = templateVars(parsed);
  } catch {
    vars = undefined;
  }
  if (vars && !vars.includes("messages") && !vars.includes("response")) {
    // a template that says nothing of the answer gets it at the end (Ollama's "touch up")
    const pos = text.length;
    parsed.root.push({ type: "action", pos, pipe: { type: "pipe", pos, decl: [], isAssign: false, cmds: [{ pos, args: [{ type: "field", pos, ident: ["Response"] }] }] } });
  }
  return { parsed, vars, toolTag: toolCallTag(parsed), thinking: thinkingTags(parsed) };
}

/** goTemplateCapabilities (server/images.go): tools for `.Tools`, insert for `.Suffix`, thinking when the trace's tags are found. */
export function templateCapabilities(t: OllamaTemplate): string[] {
  if (!t.vars) return [];
  const caps: string[] = [];
  if (t.vars.includes("tools")) caps.push("tools");
  if (t.vars.includes("suffix")) caps.push("insert");
  if (t.thinking[0] !== "" && t.thinking[1] !== "") caps.push("thinking");
  return caps;
}

type Json = Record<string, unknown>;

/** What Ollama hands its template (template.Values), in the API's JSON shapes. */
export interface TemplateValues {
  /** api.Message objects (role, content, thinking, images, tool_calls, tool_name, tool_call_id). */
  messages: Json[];
  /** api.Tool objects. */
  tools?: unknown[];
  prompt?: string;
  suffix?: string;
  think?: boolean;
  thinkLevel?: string;
  isThinkSet?: boolean;
}

/**
 * The prompt Ollama's Template.Execute writes: a fill-in-the-middle prompt (.Prompt and
 * .Suffix), the whole conversation to a template that ranges over .Messages (collated: system
 * messages also joined as .System, runs of one role merged, tool messages kept apart), or the
 * legacy way, one execution per system/user/assistant turn and the last cut after .Response.
 * Images are `[img-N]` tags before each message's text, numbered across the conversation.
 */
export function renderOllamaTemplate(t: OllamaTemplate, v: TemplateValues, now?: Date): string {
  const think = { Think: v.think ?? false, ThinkLevel: v.thinkLevel ?? "", IsThinkSet: v.isThinkSet ?? false };
  const run = (data: Record<string, unknown>, root?: Node[]) => executeGoTemplate(t.parsed, goMapOf(data), { now }, root);
  if (v.prompt && v.suffix) return run({ Prompt: v.prompt, Suffix: v.suffix, Response: "", ...think });
  const tagged = imageTagged(v.messages);
  const { system, messages } = collate(tagged);
  if (t.vars?.includes("messages")) {
    return run({ System: system, Messages: messages.map(templateMessage), Tools: templateTools(v.tools), Response: "", ...think });
  }
  let out = "";
  let sys = "";
  let prompt = "";
  let response = "";
  const turn = () => {
    out += run({ System: sys, Prompt: prompt, Response: response, ...think });
    sys = prompt = response = "";
  };
  for (const m of messages) {
    const content = String(m.content ?? "");
    if (m.role === "system") {
      if (prompt !== "" || response !== "") turn();
      sys = content;
    } else if (m.role === "user") {
      if (response !== "") turn();
      prompt = content;
    } else if (m.role === "assistant") response = content;
  }
  return out + run({ System: sys, Prompt: prompt, Response: response, ...think }, cutAfterResponse(t.parsed.root));
}

/** Ollama's image tags: `[img-N]` for each image, before the text (or where the text says `[img]`). */
function imageTagged(messages: Json[]): Json[] {
  let n = 0;
  return messages.map((m) => {
    const images = Array.isArray(m.images) ? m.images : [];
    if (images.length === 0) return m;
    let prefix = "";
    let content = String(m.content ?? "");
    for (let i = 0; i < images.length; i++) {
      const tag = `[img-${n++}]`;
      if (content.includes("[img]")) content = content.replace("[img]", tag);
      else prefix += tag;
    }
    return { ...m, content: prefix + content };
  });
}

/** collate: every system message's text as one, and consecutive messages of one role (but tool) merged. */
function collate(messages: Json[]): { system: string; messages: Json[] } {
  const system: string[] = [];
  const out: Json[] = [];
  for (const m of messages) {
    const role = String(m.role ?? "");
    if (role === "system") system.push(String(m.content ?? ""));
    const prev = out.at(-1);
    if (prev && prev.role === role && role !== "tool") out[out.length - 1] = { ...prev, content: `${String(prev.content ?? "")}\n\n${String(m.content ?? "")}` };
    else out.push({ ...m, role });
  }
  return { system: system.join("\n\n"), messages: out };
}

/** The nodes that run after the first `.Response` field removed (deleteNode: the last turn ends where the answer begins). */
function cutAfterResponse(root: Node[]): Node[] {
  let cut = false;
  const pipe = (p: PipeNode): PipeNode | undefined => {
    const cmds = [];
    for (const c of p.cmds) {
      const args = [];
      for (const a of c.args) {
        if (cut) continue;
        if (a.type === "field" && a.ident.includes("Response")) cut = true;
        args.push(a);
      }
      if (args.length > 0) cmds.push({ ...c, args });
    }
    return cmds.length > 0 ? { ...p, cmds } : undefined;
  };
  const list = (nodes: Node[]): Node[] => {
    const out: Node[] = [];
    for (const n of nodes) {
      if (cut) continue;
      if (n.type === "action") {
        const p = pipe(n.pipe);
        if (p) out.push({ ...n, pipe: p });
      } else if (n.type === "if" || n.type === "range" || n.type === "with") {
        out.push({ ...n, list: list(n.list), ...(n.elseList ? { elseList: list(n.elseList) } : {}) });
      } else out.push(n);
    }
    return out;
  };
  return list(root);
}

// ---------------------------------------------------------------- the Go values Ollama passes

function goMapOf(o: Record<string, unknown>): GoMap {
  return new GoMap(new Map(Object.entries(o)));
}

/** A JSON value as encoding/json decodes it into `any`: objects are map[string]any, numbers float64. */
function anyValue(v: unknown): unknown {
  if (v === undefined || v === null) return null;
  if (typeof v === "number") return new GoFloat(v);
  if (Array.isArray(v)) return v.map(anyValue);
  if (typeof v === "object") return new GoMap(new Map(Object.entries(v as Json).map(([k, x]) => [k, anyValue(x)])));
  return v;
}

const str = (v: unknown) => (typeof v === "string" ? v : "");
const obj = (v: unknown): Json => (v && typeof v === "object" && !Array.isArray(v) ? (v as Json) : {});

/** templateArgs: a map[string]any whose String() is its JSON ("{}" when nil). */
function templateArgs(args: unknown): GoMap {
  const nil = !args || typeof args !== "object";
  const m: GoMap = new GoMap(new Map(Object.entries(obj(args)).map(([k, x]): [string, unknown] => [k, anyValue(x)])), false, (): string => (nil ? "{}" : goJson(m)), nil);
  return m;
}

/** *templateMessage. */
function templateMessage(m: Json): GoStruct {
  const calls = Array.isArray(m.tool_calls) && m.tool_calls.length > 0 ? (m.tool_calls as Json[]) : null;
  return new GoStruct("*template.templateMessage", {
    Role: str(m.role),
    Content: str(m.content),
    Thinking: str(m.thinking),
    Images: Array.isArray(m.images) && m.images.length > 0 ? m.images : nilSlice(),
    ToolCalls:
      calls?.map((tc, i) => {
        const f = obj(tc.function);
        return new GoStruct("template.templateToolCall", {
          ID: str(tc.id),
          Function: new GoStruct("template.templateToolCallFunction", { Index: typeof f.index === "number" ? f.index : i, Name: str(f.name), Arguments: templateArgs(f.arguments) }),
        });
      }) ?? nilSlice(),
    ToolName: str(m.tool_name),
    ToolCallID: str(m.tool_call_id),
  });
}

/** templateTools: the request's tools, a slice whose String() is its JSON (nil without tools). */
function templateTools(tools: unknown[] | undefined): GoSlice {
  if (!tools || tools.length === 0) return nilSlice(() => "null");
  const out: GoSlice = tools.map((raw) => templateTool(obj(raw)));
  out.stringer = () => goJson(out);
  return out;
}

function templateTool(t: Json): GoStruct {
  const f = obj(t.function);
  const p = obj(f.parameters);
  const props = p.properties && typeof p.properties === "object" ? Object.entries(p.properties as Json) : undefined;
  const properties: GoMap = new GoMap(new Map((props ?? []).map(([k, v]) => [k, toolProperty(obj(v))])), false, () => (props ? goJson(properties) : "{}"), !props);
  const required = Array.isArray(p.required) && p.required.length > 0 ? (p.required as string[]) : undefined;
  const parameters = new GoStruct(
    "template.templateToolFunctionParameters",
    { Type: str(p.type), Defs: anyValue(p.$defs), Items: anyValue(p.items), Required: required ?? nilSlice(), Properties: properties },
    {
      json: () => ({
        type: str(p.type),
        ...(p.$defs != null ? { $defs: JSON.parse(goJson(anyValue(p.$defs))) } : {}),
        ...(p.items != null ? { items: JSON.parse(goJson(anyValue(p.items))) } : {}),
        ...(required ? { required } : {}),
        properties: JSON.parse(goJson(properties)),
      }),
    },
  );
  const fn = new GoStruct("template.templateToolFunction", { Name: str(f.name), Description: str(f.description), Parameters: parameters }, { json: () => ({ name: str(f.name), description: str(f.description), parameters: JSON.parse(goJson(parameters)) }) });
  const tool: GoStruct = new GoStruct("template.templateTool", { Type: str(t.type), Items: anyValue(t.items), Function: fn }, {
    json: () => ({ type: str(t.type), ...(t.items != null ? { items: JSON.parse(goJson(anyValue(t.items))) } : {}), function: JSON.parse(goJson(fn)) }),
    stringer: () => goJson(tool),
  });
  return tool;
}

/** api.ToolProperty: PropertyType prints as its one type (or `[a b]`), and it has ToTypeScriptType. */
function toolProperty(p: Json): GoStruct {
  const types: GoSlice = typeof p.type === "string" ? [p.type] : Array.isArray(p.type) ? (p.type as string[]).slice() : [];
  types.stringer = () => (types.length === 0 ? "" : types.length === 1 ? String(types[0]) : `[${types.join(" ")}]`);
  const anyOf = Array.isArray(p.anyOf) && p.anyOf.length > 0 ? (p.anyOf as unknown[]).map((x) => toolProperty(obj(x))) : undefined;
  const nested = p.properties && typeof p.properties === "object" ? Object.entries(p.properties as Json) : undefined;
  const properties = nested ? new GoMap(new Map(nested.map(([k, v]) => [k, toolProperty(obj(v))])), true) : null;
  const required = Array.isArray(p.required) && p.required.length > 0 ? (p.required as string[]) : undefined;
  const enumValues = Array.isArray(p.enum) && p.enum.length > 0 ? (p.enum as unknown[]).map(anyValue) : undefined;
  const self: GoStruct = new GoStruct(
    "api.ToolProperty",
    { AnyOf: anyOf ?? nilSlice(), Type: types, Items: anyValue(p.items), Description: str(p.description), Enum: enumValues ?? nilSlice(), Properties: properties, Required: required ?? nilSlice() },
    {
      methods: { ToTypeScriptType: () => typeScriptType(self) },
      json: () => ({
        ...(anyOf ? { anyOf: anyOf.map((x) => JSON.parse(goJson(x))) } : {}),
        ...(types.length === 1 ? { type: types[0] } : types.length > 1 ? { type: types } : {}),
        ...(p.items != null ? { items: JSON.parse(goJson(anyValue(p.items))) } : {}),
        ...(str(p.description) ? { description: str(p.description) } : {}),
        ...(enumValues ? { enum: JSON.parse(goJson(enumValues)) } : {}),
        ...(properties ? { properties: JSON.parse(goJson(properties)) } : {}),
        ...(required ? { required } : {}),
      }),
    },
  );
  return self;
}

function typeScriptType(p: GoStruct): string {
  const anyOf = p.fields.AnyOf as GoStruct[];
  if (anyOf.length > 0) return anyOf.map(typeScriptType).join(" | ");
  const types = p.fields.Type as string[];
  if (types.length === 0) return "any";
  const one = (t: string) => ({ string: "string", number: "number", integer: "number", boolean: "boolean", array: "any[]", object: "Record<string, any>", null: "null" })[t] ?? "any";
  return types.map(one).join(" | ");
}
