import type { OllamaToolCall } from "./stream";

type Json = Record<string, unknown>;

/**
 * Tool calls in a model's raw output, found the way Ollama's tools.Parser finds them for a
 * model rendered with its Go template: text up to the template's tool-call tag is content;
 * after it, each tool name that appears followed by a JSON object of its arguments is a call.
 * With the tag "{" (or "["), the output is a call only when it starts with one (after blanks),
 * and the parser is done at the matching close.
 */
export class ToolCallParser {
  private state: "looking" | "calling" | "done" = "looking";
  private buffer = "";
  private n = 0;
  private readonly names: string[];

  constructor(
    readonly tag: string,
    tools: unknown[],
  ) {
    this.names = tools.map((t) => String(((t as Json)?.function as Json | undefined)?.name ?? "")).filter((n) => n !== "");
  }

  /** The text of one piece: the calls it completed and the content to pass on. */
  add(s: string): { calls: OllamaToolCall[]; content: string } {
    if (this.state === "done") return { calls: [], content: s };
    this.buffer += s;
    let content = "";
    if (this.state === "looking") {
      const { at, found } = this.findTag();
      if (at < 0) {
        content = this.buffer;
        this.buffer = "";
      } else {
        content = this.buffer.slice(0, at);
        this.buffer = this.buffer.slice(at);
      }
      if ((this.tag === "{" || this.tag === "[") && content.trim() !== "") {
        this.state = "done";
        const all = content + this.buffer;
        this.buffer = "";
        return { calls: [], content: all };
      }
      if (!found) return { calls: [], content };
      this.state = "calling";
    }
    const calls: OllamaToolCall[] = [];
    for (let c = this.nextCall(); c; c = this.nextCall()) calls.push(c);
    if (this.closed()) {
      this.state = "done";
      content = this.buffer;
      this.buffer = "";
    }
    return { calls, content };
  }

  /** What is left at the end (Parser.Content): with a "{" or "[" tag and no call, the held text; else nothing. */
  rest(): string {
    const b = this.buffer;
    this.buffer = "";
    return this.n === 0 && (this.tag === "{" || this.tag === "[") ? b : "";
  }

  /** Where the tag is (found), or where a prefix of it ends the buffer (held back, not found). */
  private findTag(): { at: number; found: boolean } {
    const i = this.buffer.indexOf(this.tag);
    if (i >= 0) return { at: i, found: true };
    for (let k = Math.min(this.buffer.length, this.tag.length); k > 0; k--) if (this.buffer.endsWith(this.tag.slice(0, k))) return { at: this.buffer.length - k, found: false };
    return { at: -1, found: false };
  }

  private nextCall(): OllamaToolCall | undefined {
    const tool = this.findTool();
    if (!tool) return undefined;
    const args = findArguments(tool.name, this.buffer);
    if (!args) return undefined;
    const call: OllamaToolCall = { function: { index: this.n++, name: tool.name, arguments: args.value } };
    this.buffer = this.buffer.slice(Math.max(tool.end, args.end));
    return call;
  }

  /** The earliest (then longest) tool name in the buffer; none while the buffer ends in what may be the start of a longer name. */
  private findTool(): { name: string; end: number } | undefined {
    const b = this.buffer;
    if (b === "") return undefined;
    const longest = Math.max(0, ...this.names.map((n) => n.length));
    for (let i = 1; i <= Math.min(b.length, longest); i++) {
      const tail = b.slice(b.length - i);
      if (this.names.some((n) => tail.length < n.length && n.startsWith(tail))) return undefined;
    }
    let best: { name: string; start: number } | undefined;
    for (const name of this.names) {
      const pos = b.indexOf(name);
      if (pos < 0) continue;
      if (best && (pos > best.start || (pos === best.start && name.length <= best.name.length))) continue;
      best = { name, start: pos };
    }
    return best && { name: best.name, end: best.start + best.name.length };
  }

  /** With a "{" or "[" tag: the first bracket closed again (outside strings). */
  private closed(): boolean {
    const pair = this.tag === "{" ? "{}" : this.tag === "[" ? "[]" : undefined;
    if (!pair) return false;
    let depth = 0;
    let inString = false;
    let escaped = false;
    for (const c of this.buffer) {
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === '"') inString = !inString;
      else if (!inString && c === pair[0]) depth++;
      else if (!inString && c === pair[1] && --depth === 0) return true;
    }
    return false;
  }
}

/**
 * The first JSON object in `buffer` that holds the arguments of `tool`: its `arguments` (or
 * `parameters`) beside a `name`, a member named after the tool, the same found in a nested
 * object, or else the object itself. `end` is where the object ends.
 */
function findArguments(tool: string, buffer: string): { value: Record<string, unknown>; end: number } | undefined {
  let start = -1;
  let braces = 0;
  let inString = false;
  let escaped = false;
  for (let i = 0; i < buffer.length; i++) {
    const c = buffer[i];
    if (escaped) {
      escaped = false;
      continue;
    }
    if (c === "\\") {
      escaped = true;
      continue;
    }
    if (c === '"') {
      inString = !inString;
      continue;
    }
    if (inString) continue;
    if (c === "{") {
      if (braces === 0) start = i;
      braces++;
    } else if (c === "}") {
      braces--;
      if (braces === 0 && start !== -1) {
        let data: unknown;
        try {
          data = JSON.parse(buffer.slice(start, i + 1));
        } catch {
          start = -1;
          continue;
        }
        if (!isObject(data)) {
          start = -1;
          continue;
        }
        // a call named without its arguments is not one (yet), as in Ollama
        const found = argumentsIn(tool, data);
        if (found && !found.args) return undefined;
        return { value: found?.args ?? data, end: i + 1 };
      }
      if (braces < 0) braces = 0;
    }
  }
  return undefined;
}

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

function argumentsIn(tool: string, o: Json): { args: Json | undefined } | undefined {
  const member = (k: string): Json | undefined => {
    const v = o[k];
    if (isObject(v)) return v;
    if (typeof v === "string") {
      try {
        const parsed = JSON.parse(v) as unknown;
        if (isObject(parsed)) return parsed;
      } catch {
        // not JSON text
      }
    }
    return undefined;
  };
  if ("name" in o) return { args: member("arguments") ?? member("parameters") };
  const named = member(tool);
  if (named) return { args: named };
  for (const v of Object.values(o)) {
    for (const child of Array.isArray(v) ? v : [v]) {
      if (!isObject(child)) continue;
      const r = argumentsIn(tool, child);
      if (r) return r;
    }
  }
  return undefined;
}
