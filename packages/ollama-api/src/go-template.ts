/**
 * Go's text/template, the part Ollama's TEMPLATE layers use: a parser to a tree shaped like
 * text/template/parse's (so Ollama's tree walks, Vars and the tool-call tag, read the same), and
 * an executor with Go's semantics (truth, printing, comparison, variable scope, map order).
 *
 * Go values are modelled as: string, number (int), GoFloat (float64 from JSON), boolean,
 * null (nil), arrays (slices), GoMap (maps: ranged and marshalled in key order), GoStruct (a
 * field lookup that fails on a missing field, as a struct does), with a String() method (fmt's
 * Stringer) where the Go type has one.
 */

/** A template Go would refuse to parse, or that fails as it runs; `offset` is a character offset in the template's text. */
export class GoTemplateError extends Error {
  override readonly name = "GoTemplateError";
  constructor(
    readonly reason: string,
    readonly offset: number,
    readonly phase: "parse" | "exec",
    /** The template's text (for the line and column in the message). */
    source: string,
  ) {
    super(`template: ${phase} error at ${lineCol(source, offset)} (offset ${offset}): ${reason}`);
  }
}

function lineCol(src: string, offset: number): string {
  const before = src.slice(0, offset);
  const line = before.split("\n").length;
  return `line ${line}, column ${offset - before.lastIndexOf("\n")}`;
}

// ---------------------------------------------------------------- values

/** A float64 (JSON numbers in `any` fields are float64 in Go): prints as %v does. */
export class GoFloat {
  constructor(readonly value: number) {}
}

/** A Go map: lookup by key; range and marshalling in sorted key order (or insertion order for Ollama's ordered maps). */
export class GoMap {
  constructor(
    readonly entries: Map<string, unknown>,
    readonly ordered = false,
    readonly stringer?: () => string,
    /** A nil map of a type: marshals as null. */
    readonly nil = false,
  ) {}
  keys(): string[] {
    const k = [...this.entries.keys()];
    return this.ordered ? k : k.sort(compareBytes);
  }
}

/** A Go struct (or a pointer to one): its exported fields, its String() and exported methods when it has them. */
export class GoStruct {
  constructor(
    readonly typeName: string,
    readonly fields: Record<string, unknown>,
    readonly opts: { stringer?: () => string; json?: () => unknown; methods?: Record<string, () => unknown> } = {},
  ) {}
}

/** A slice that may have a String() method (Ollama's templateTools), or be a typed nil (prints `[]`, marshals as null). */
export type GoSlice = unknown[] & { stringer?: () => string; nil?: boolean };

/** A nil slice of a type (Go prints it as `[]` and marshals it as null, where an untyped nil is `<nil>`). */
export function nilSlice(stringer?: () => string): GoSlice {
  return Object.assign([] as unknown[], { nil: true, ...(stringer ? { stringer } : {}) });
}

const compareBytes = (a: string, b: string) => (Buffer.compare(Buffer.from(a), Buffer.from(b)));

// ---------------------------------------------------------------- tree

export type Node = TextNode | ActionNode | IfNode | RangeNode | WithNode | TemplateNode | BreakNode | ContinueNode;
export interface TextNode { type: "text"; pos: number; text: string }
export interface ActionNode { type: "action"; pos: number; pipe: PipeNode }
export interface BranchNode { pos: number; pipe: PipeNode; list: Node[]; elseList?: Node[] }
export interface IfNode extends BranchNode { type: "if" }
export interface RangeNode extends BranchNode { type: "range" }
export interface WithNode extends BranchNode { type: "with" }
export interface TemplateNode { type: "template"; pos: number; name: string; pipe?: PipeNode }
export interface BreakNode { type: "break"; pos: number }
export interface ContinueNode { type: "continue"; pos: number }
export interface PipeNode { type: "pipe"; pos: number; decl: string[]; isAssign: boolean; cmds: CommandNode[] }
export interface CommandNode { pos: number; args: Arg[] }
export type Arg =
  | { type: "field"; pos: number; ident: string[] }
  | { type: "variable"; pos: number; ident: string[] } // ident[0] is "$" or "$name"
  | { type: "dot"; pos: number }
  | { type: "chain"; pos: number; node: Arg; field: string[] }
  | { type: "identifier"; pos: number; name: string }
  | { type: "string"; pos: number; value: string }
  | { type: "number"; pos: number; value: number; float: boolean }
  | { type: "bool"; pos: number; value: boolean }
  | { type: "nil"; pos: number }
  | PipeNode;

/** A parsed template: the root list and the templates it defines ({{define}} and {{block}}). */
export interface ParsedTemplate {
  source: string;
  root: Node[];
  defines: Map<string, Node[]>;
}

// ---------------------------------------------------------------- lexer

type Tok =
  | { t: "text"; pos: number; text: string }
  | { t: "left"; pos: number }
  | { t: "right"; pos: number }
  | { t: "space"; pos: number }
  | { t: "field"; pos: number; text: string } // ".Name"
  | { t: "variable"; pos: number; text: string } // "$" or "$name"
  | { t: "dot"; pos: number }
  | { t: "ident"; pos: number; text: string } // keywords, functions, true/false/nil
  | { t: "string"; pos: number; value: string }
  | { t: "number"; pos: number; value: number; float: boolean }
  | { t: "char"; pos: number; value: number }
  | { t: "("; pos: number }
  | { t: ")"; pos: number }
  | { t: "|"; pos: number }
  | { t: ":="; pos: number }
  | { t: "="; pos: number }
  | { t: ","; pos: number }
  | { t: "eof"; pos: number };

const isSpace = (c: string | undefined) => c === " " || c === "\t" || c === "\r" || c === "\n";
const isAlnum = (c: string | undefined) => c !== undefined && /[\p{L}\p{Nd}_]/u.test(c);

function lex(src: string): Tok[] {
  const toks: Tok[] = [];
  let i = 0;
  let text = "";
  let textPos = 0;
  const fail = (msg: string, at: number): never => {
    throw new GoTemplateError(msg, at, "parse", src);
  };
  while (i < src.length) {
    const open = src.indexOf("{{", i);
    if (open < 0) {
      text += src.slice(i);
      i = src.length;
      break;
    }
    text += src.slice(i, open);
    let j = open + 2;
    const trimLeft = src[j] === "-" && isSpace(src[j + 1]);
    if (trimLeft) {
      text = text.replace(/[ \t\r\n]+$/, "");
      j += 2;
    }
    if (text !== "") toks.push({ t: "text", pos: textPos, text });
    text = "";
    // a comment: {{/* … */}}, with trim markers outside it
    let k = j;
    while (trimLeft && isSpace(src[k])) k++;
    if (src.startsWith("/*", k)) {
      const end = src.indexOf("*/", k + 2);
      if (end < 0) fail("unclosed comment", open);
      let m = end + 2;
      const trimRight = isSpace(src[m]) && src.startsWith("-}}", m + 1);
      if (trimRight) m += 2;
      if (!src.startsWith("}}", m)) fail("comment ends before closing delimiter", m);
      i = m + 2;
      if (trimRight) while (isSpace(src[i])) i++;
      textPos = i;
      continue;
    }
    toks.push({ t: "left", pos: open });
    // inside the action
    let parens = 0;
    for (;;) {
      if (j >= src.length) fail("unclosed action", open);
      const c = src[j]!;
      if (isSpace(c)) {
        const start = j;
        while (isSpace(src[j])) j++;
        // " -}}" ends the action and trims what follows
        if (src[j] === "-" && src.startsWith("-}}", j)) {
          toks.push({ t: "right", pos: j });
          j += 3;
          while (isSpace(src[j])) j++;
          break;
        }
        if (src.startsWith("}}", j)) continue;
        toks.push({ t: "space", pos: start });
        continue;
      }
      if (src.startsWith("}}", j)) {
        if (parens > 0) fail("unclosed left paren", j);
        toks.push({ t: "right", pos: j });
        j += 2;
        break;
      }
      const start = j;
      if (c === '"') {
        j++;
        let s = "";
        for (;;) {
          if (j >= src.length || src[j] === "\n") fail("unterminated quoted string", start);
          const d = src[j]!;
          if (d === '"') break;
          if (d === "\\") {
            const [ch, len] = escapeAt(src, j, '"', start, fail);
            s += ch;
            j += len;
          } else {
            s += d;
            j++;
          }
        }
        j++;
        toks.push({ t: "string", pos: start, value: s });
      } else if (c === "`") {
        const end = src.indexOf("`", j + 1);
        if (end < 0) fail("unterminated raw quoted string", start);
        toks.push({ t: "string", pos: start, value: src.slice(j + 1, end).replace(/\r/g, "") });
        j = end + 1;
      } else if (c === "'") {
        j++;
        let value: number;
        if (src[j] === "\\") {
          const [ch, len] = escapeAt(src, j, "'", start, fail);
          value = ch.codePointAt(0)!;
          j += len;
        } else {
          value = src.codePointAt(j)!;
          j += value > 0xffff ? 2 : 1;
        }
        if (src[j] !== "'") fail("unterminated character constant", start);
        j++;
        toks.push({ t: "char", pos: start, value });
      } else if (c === "(" || c === ")" || c === "|" || c === ",") {
        if (c === "(") parens++;
        if (c === ")") {
          parens--;
          if (parens < 0) fail("unexpected right paren", j);
        }
        toks.push({ t: c, pos: j });
        j++;
      } else if (c === ":" && src[j + 1] === "=") {
        toks.push({ t: ":=", pos: j });
        j += 2;
      } else if (c === "=") {
        toks.push({ t: "=", pos: j });
        j++;
      } else if (c === "$") {
        j++;
        while (isAlnum(src[j])) j++;
        toks.push({ t: "variable", pos: start, text: src.slice(start, j) });
      } else if (c === ".") {
        if (/[0-9]/.test(src[j + 1] ?? "")) {
          j = number(src, j, toks, fail);
        } else if (isAlnum(src[j + 1])) {
          j++;
          while (isAlnum(src[j])) j++;
          toks.push({ t: "field", pos: start, text: src.slice(start + 1, j) });
        } else {
          toks.push({ t: "dot", pos: j });
          j++;
        }
      } else if (/[0-9+\-]/.test(c)) {
        j = number(src, j, toks, fail);
      } else if (isAlnum(c)) {
        while (isAlnum(src[j])) j++;
        toks.push({ t: "ident", pos: start, text: src.slice(start, j) });
      } else {
        fail(`unexpected ${JSON.stringify(c)} in command`, j);
      }
    }
    i = j;
    textPos = i;
  }
  if (text !== "") toks.push({ t: "text", pos: textPos, text });
  toks.push({ t: "eof", pos: src.length });
  return toks;
}

function escapeAt(src: string, j: number, quote: string, start: number, fail: (m: string, at: number) => never): [string, number] {
  const e = src[j + 1];
  const simple: Record<string, string> = { a: "\x07", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t", v: "\v", "\\": "\\", [quote]: quote };
  if (e !== undefined && e in simple) return [simple[e]!, 2];
  const hex = (n: number): [string, number] => {
    const h = src.slice(j + 2, j + 2 + n);
    if (!new RegExp(`^[0-9a-fA-F]{${n}}$`).test(h)) fail("invalid syntax in escape", start);
    return [String.fromCodePoint(parseInt(h, 16)), 2 + n];
  };
  if (e === "x") return hex(2);
  if (e === "u") return hex(4);
  if (e === "U") return hex(8);
  if (e !== undefined && /[0-7]/.test(e)) {
    const o = src.slice(j + 1, j + 4);
    if (!/^[0-7]{3}$/.test(o)) fail("invalid syntax in escape", start);
    return [String.fromCharCode(parseInt(o, 8)), 4];
  }
  return fail("invalid syntax in escape", start);
}

function number(src: string, j: number, toks: Tok[], fail: (m: string, at: number) => never): number {
  const m = /^[+-]?(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(\d[\d_]*)?\.?\d*([eE][+-]?\d+)?)/.exec(src.slice(j));
  const text = m?.[0] ?? "";
  if (text === "" || text === "+" || text === "-" || /[\p{L}_]/u.test(src[j + text.length] ?? "")) fail(`bad number syntax: ${JSON.stringify(src.slice(j, j + text.length + 1))}`, j);
  const clean = text.replace(/_/g, "");
  const sign = clean.startsWith("-") ? -1 : 1;
  const body = clean.replace(/^[+-]/, "");
  const isFloat = !/^0[xXbBoO]/.test(body) && /[.eE]/.test(body);
  const value = sign * (/^0[xXbBoO]/.test(body) ? Number(body.toLowerCase()) : isFloat ? Number(body) : /^0\d/.test(body) ? parseInt(body, 8) : Number(body));
  if (Number.isNaN(value)) fail(`bad number syntax: ${JSON.stringify(text)}`, j);
  toks.push({ t: "number", pos: j, value, float: isFloat });
  return j + text.length;
}

// ---------------------------------------------------------------- parser

const BUILTINS = new Set(["and", "call", "html", "index", "slice", "js", "len", "not", "or", "print", "printf", "println", "urlquery", "eq", "ge", "gt", "le", "lt", "ne"]);
/** The functions Ollama adds (template/template.go funcs). */
const OLLAMA_FUNCS = new Set(["json", "currentDate", "yesterdayDate", "toTypeScriptType"]);

/** Parses a template as Ollama does (text/template with Ollama's functions); a bad one throws GoTemplateError. */
export function parseGoTemplate(source: string): ParsedTemplate {
  return new Parser(source).parse();
}

type End = { kind: "end" | "else"; pos: number; elseTail?: Node[] };

class Parser {
  private toks: Tok[];
  private i = 0;
  private readonly defines = new Map<string, Node[]>();
  private rangeDepth = 0;
  private vars: string[] = ["$"];

  constructor(private readonly src: string) {
    this.toks = lex(src);
  }

  private fail(msg: string, at: number): never {
    throw new GoTemplateError(msg, at, "parse", this.src);
  }

  parse(): ParsedTemplate {
    const { list, end } = this.list(false);
    if (end) this.fail(`unexpected {{${end.kind}}}`, end.pos);
    return { source: this.src, root: list, defines: this.defines };
  }

  private peek(skipSpace = true): Tok {
    let k = this.i;
    while (skipSpace && this.toks[k]!.t === "space") k++;
    return this.toks[k]!;
  }

  private next(skipSpace = true): Tok {
    while (skipSpace && this.toks[this.i]!.t === "space") this.i++;
    return this.toks[this.i++]!;
  }

  /** Nodes until {{end}} / {{else}} (inBranch) or the end of input. */
  private list(inBranch: boolean): { list: Node[]; end?: End } {
    const list: Node[] = [];
    for (;;) {
      const t = this.next(false);
      if (t.t === "eof") {
        if (inBranch) this.fail("unexpected EOF", t.pos);
        return { list };
      }
      if (t.t === "text") {
        list.push({ type: "text", pos: t.pos, text: t.text });
        continue;
      }
      if (t.t !== "left") this.fail("unexpected token", t.pos);
      const kw = this.peek();
      if (kw.t === "ident") {
        switch (kw.text) {
          case "end":
            this.next();
            this.expectRight("end");
            if (!inBranch) this.fail("unexpected {{end}}", kw.pos);
            return { list, end: { kind: "end", pos: kw.pos } };
          case "else": {
            this.next();
            if (!inBranch) this.fail("unexpected {{else}}", kw.pos);
            const after = this.peek();
            if (after.t === "ident" && (after.text === "if" || after.text === "with")) {
              // {{else if …}} is an {{if}} nested in the else list, ending at the same {{end}}
              this.next();
              const node = this.branch(after.text, after.pos);
              return { list, end: { kind: "else", pos: kw.pos, elseTail: [node] } };
            }
            this.expectRight("else");
            return { list, end: { kind: "else", pos: kw.pos } };
          }
          case "if":
          case "range":
          case "with":
            this.next();
            list.push(this.branch(kw.text, kw.pos));
            continue;
          case "break":
          case "continue":
            this.next();
            if (this.rangeDepth === 0) this.fail(`{{${kw.text}}} outside {{range}}`, kw.pos);
            this.expectRight(kw.text);
            list.push({ type: kw.text, pos: kw.pos });
            continue;
          case "template":
            this.next();
            list.push(this.templateCall(kw.pos));
            continue;
          case "define":
          case "block": {
            this.next();
            const name = this.next();
            if (name.t !== "string") this.fail(`unexpected token in ${kw.text} clause`, name.pos);
            let pipe: PipeNode | undefined;
            if (kw.text === "block") pipe = this.pipeline("block");
            else this.expectRight("define");
            const saved = this.vars;
            this.vars = ["$"];
            const body = this.list(true);
            this.vars = saved;
            if (body.end?.kind !== "end") this.fail(`unexpected {{else}} in ${kw.text}`, body.end?.pos ?? kw.pos);
            this.defines.set(name.value, body.list);
            if (kw.text === "block") list.push({ type: "template", pos: kw.pos, name: name.value, pipe });
            continue;
          }
        }
      }
      const pipe = this.pipeline("command");
      list.push({ type: "action", pos: t.pos, pipe });
    }
  }

  private expectRight(context: string): void {
    const t = this.next();
    if (t.t !== "right") this.fail(`unexpected token in ${context}`, t.pos);
  }

  private templateCall(pos: number): TemplateNode {
    const name = this.next();
    if (name.t !== "string") this.fail("unexpected token in template clause", name.pos);
    if (this.peek().t === "right") {
      this.next();
      return { type: "template", pos, name: name.value };
    }
    return { type: "template", pos, name: name.value, pipe: this.pipeline("template") };
  }

  private branch(kind: string, pos: number): IfNode | RangeNode | WithNode {
    const varsBefore = this.vars.length;
    const pipe = this.pipeline(kind);
    if (kind === "range") this.rangeDepth++;
    const body = this.list(true);
    if (kind === "range") this.rangeDepth--;
    let elseList: Node[] | undefined;
    if (body.end?.kind === "else") {
      if (body.end.elseTail) elseList = body.end.elseTail; // the nested if consumed the {{end}}
      else {
        const rest = this.list(true);
        if (rest.end?.kind !== "end") this.fail("expected end; found {{else}}", rest.end?.pos ?? pos);
        elseList = rest.list;
      }
    }
    this.vars.length = varsBefore;
    return { type: kind as "if", pos, pipe, list: body.list, elseList };
  }

  /** A pipeline up to }} (or ")" inside parentheses): declarations, then commands joined by |. */
  private pipeline(context: string, inParens = false): PipeNode {
    const start = this.peek();
    const pipe: PipeNode = { type: "pipe", pos: start.pos, decl: [], isAssign: false, cmds: [] };
    // $x := / $x = / $i, $v :=
    if (start.t === "variable") {
      const save = this.i;
      const v1 = this.next();
      const after = this.peek();
      if (after.t === ":=" || after.t === "=") {
        this.next();
        pipe.decl.push((v1 as { text: string }).text);
        pipe.isAssign = after.t === "=";
      } else if (after.t === "," && context === "range") {
        this.next();
        const v2 = this.next();
        if (v2.t !== "variable") this.fail("range can only initialize variables", v2.pos);
        const op = this.next();
        if (op.t !== ":=" && op.t !== "=") this.fail("expected := or = after range variables", op.pos);
        pipe.decl.push((v1 as { text: string }).text, v2.text);
        pipe.isAssign = op.t === "=";
      } else this.i = save;
      for (const d of pipe.decl) {
        if (pipe.isAssign) {
          if (!this.vars.includes(d)) this.fail(`undefined variable "${d}"`, start.pos);
        } else this.vars.push(d);
      }
    }
    for (;;) {
      const t = this.peek();
      if (t.t === "right" || (inParens && t.t === ")")) {
        if (pipe.cmds.length === 0) this.fail(`missing value for ${context}`, t.pos);
        this.next();
        return pipe;
      }
      if (t.t === "eof") this.fail(`unclosed action`, t.pos);
      pipe.cmds.push(this.command(inParens));
      const sep = this.peek();
      if (sep.t === "|") {
        this.next();
        const after = this.peek();
        if (after.t === "right" || after.t === ")") this.fail("missing command after |", after.pos);
      }
    }
  }

  private command(inParens: boolean): CommandNode {
    const cmd: CommandNode = { pos: this.peek().pos, args: [] };
    for (;;) {
      while (this.toks[this.i]!.t === "space") this.i++;
      const t = this.toks[this.i]!;
      if (t.t === "right" || t.t === "|" || (inParens && t.t === ")")) break;
      if (t.t === ")") this.fail("unexpected right paren", t.pos);
      cmd.args.push(this.operand());
      const after = this.toks[this.i]!;
      if (after.t !== "space" && after.t !== "right" && after.t !== "|" && after.t !== ")") this.fail(`missing space?`, after.pos);
    }
    if (cmd.args.length === 0) this.fail("empty command", cmd.pos);
    return cmd;
  }

  /** A term and the fields that follow it without a space (.A.B, $x.A, (…).A). */
  private operand(): Arg {
    let node = this.term();
    const fields: string[] = [];
    while (this.toks[this.i]!.t === "field") fields.push((this.toks[this.i++] as { text: string }).text);
    if (fields.length === 0) return node;
    if (node.type === "field" || node.type === "variable") return { ...node, ident: [...node.ident, ...fields] };
    if (node.type === "dot") this.fail("unexpected . after term", node.pos);
    if (node.type === "string" || node.type === "number" || node.type === "bool" || node.type === "nil") this.fail(`unexpected . after term ${JSON.stringify(node.type)}`, node.pos);
    if (node.type === "chain") return { ...node, field: [...node.field, ...fields] };
    node = { type: "chain", pos: node.pos, node, field: fields };
    return node;
  }

  private term(): Arg {
    const t = this.next(false);
    switch (t.t) {
      case "field":
        return { type: "field", pos: t.pos, ident: [t.text] };
      case "variable":
        if (!this.vars.includes(t.text)) this.fail(`undefined variable "${t.text}"`, t.pos);
        return { type: "variable", pos: t.pos, ident: [t.text] };
      case "dot":
        return { type: "dot", pos: t.pos };
      case "string":
        return { type: "string", pos: t.pos, value: t.value };
      case "number":
        return { type: "number", pos: t.pos, value: t.value, float: t.float };
      case "char":
        return { type: "number", pos: t.pos, value: t.value, float: false };
      case "(":
        return this.pipeline("parenthesized pipeline", true);
      case "ident":
        if (t.text === "true" || t.text === "false") return { type: "bool", pos: t.pos, value: t.text === "true" };
        if (t.text === "nil") return { type: "nil", pos: t.pos };
        if (!BUILTINS.has(t.text) && !OLLAMA_FUNCS.has(t.text)) this.fail(`function "${t.text}" not defined`, t.pos);
        return { type: "identifier", pos: t.pos, name: t.text };
    }
    return this.fail(`unexpected ${t.t === "right" ? "}}" : t.t} in operand`, t.pos);
  }
}

// ---------------------------------------------------------------- Ollama's tree walks

/**
 * The identifiers a template uses, lower-cased, sorted and unique: Ollama's Template.Vars
 * (template/template.go Identifiers) over the root and every defined template. Fields and
 * variables give their whole chain (`$.Tools` gives "$" and "tools"); a chain on a
 * parenthesized value gives nothing, as in Ollama. Throws as Ollama's does for a {{template}}
 * without a pipeline.
 */
export function templateVars(t: ParsedTemplate): string[] {
  const names: string[] = [];
  const pipe = (p: PipeNode) => {
    for (const c of p.cmds) for (const a of c.args) arg(a);
  };
  const arg = (a: Arg) => {
    if (a.type === "field" || a.type === "variable") names.push(...a.ident);
    else if (a.type === "pipe") pipe(a);
  };
  const list = (nodes: Node[]) => {
    for (const n of nodes) {
      if (n.type === "action") pipe(n.pipe);
      else if (n.type === "template") {
        if (!n.pipe) throw new GoTemplateError("undefined template specified", n.pos, "parse", t.source);
        pipe(n.pipe);
      } else if (n.type === "if" || n.type === "range" || n.type === "with") {
        pipe(n.pipe);
        list(n.list);
        if (n.elseList) list(n.elseList);
      }
    }
  };
  list(t.root);
  for (const body of t.defines.values()) list(body);
  return [...new Set(names.map((n) => n.toLowerCase()))].sort();
}

const usesField = (p: PipeNode, name: string) => p.cmds.some((c) => c.args.some((a) => a.type === "field" && a.ident.includes(name)));

/**
 * The text that opens a tool call in the model's output, as Ollama's tools parser finds it
 * (tools/template.go parseTag): the first non-blank text inside the first {{if}} on
 * `.ToolCalls`, up to a `{`, trimmed; "{" when there is none.
 */
export function toolCallTag(t: ParsedTemplate): string {
  const findIf = (nodes: Node[]): IfNode | undefined => {
    for (const n of nodes) {
      if (n.type === "if" && usesField(n.pipe, "ToolCalls")) return n;
      if (n.type === "if" || n.type === "range" || n.type === "with") {
        const r = findIf(n.list) ?? (n.elseList ? findIf(n.elseList) : undefined);
        if (r) return r;
      }
    }
    return undefined;
  };
  const findText = (nodes: Node[]): TextNode | undefined | null => {
    for (const n of nodes) {
      if (n.type === "text") {
        if (n.text.trim() === "") continue;
        return n;
      }
      if (n.type === "if" || n.type === "range" || n.type === "with") {
        return findText(n.list) ?? (n.elseList ? findText(n.elseList) : undefined) ?? null;
      }
      if (n.type === "action") return null;
    }
    return undefined;
  };
  const node = findIf(t.root);
  const text = node ? findText(node.list) : undefined;
  if (!text) return "{";
  const tag = text.text.replace(/\r\n/g, "\n").split("{")[0]!.trim();
  return tag === "" ? "{" : tag;
}

/**
 * The tags around a thinking trace (thinking/template.go InferTags): for a `.Thinking` inside a
 * {{range}} over `.Messages`, the first and last text of the nearest enclosing list, trimmed.
 */
export function thinkingTags(t: ParsedTemplate): [string, string] {
  let open = "";
  let close = "";
  const visitList = (nodes: Node[], ranges: RangeNode[]) => {
    const onThinking = () => {
      const r = ranges.at(-1);
      if (!r || !r.pipe.cmds.some((c) => c.args.some((a) => a.type === "field" && a.ident[0] === "Messages"))) return;
      const first = nodes[0];
      const last = nodes.at(-1);
      open = first?.type === "text" ? first.text.trim() : "";
      close = last?.type === "text" ? last.text.trim() : "";
    };
    const visitPipe = (p: PipeNode) => {
      for (const c of p.cmds)
        for (const a of c.args) {
          if (a.type === "field" && a.ident[0] === "Thinking") onThinking();
          if (a.type === "pipe") visitPipe(a);
        }
    };
    for (const n of nodes) {
      if (n.type === "action" || (n.type === "template" && n.pipe)) visitPipe(n.pipe!);
      if (n.type === "if" || n.type === "range" || n.type === "with") {
        const inner = n.type === "range" ? [...ranges, n] : ranges;
        visitPipe(n.pipe);
        visitList(n.list, inner);
        if (n.elseList) visitList(n.elseList, inner);
      }
    }
  };
  visitList(t.root, []);
  return [open, close];
}

// ---------------------------------------------------------------- executor

/** text/template's invalid reflect.Value: a missing map key of interface type ("<no value>"). */
const NO_VALUE = Symbol("no value");

class Break {}
class Continue {}

export interface ExecOptions {
  /** Now, for currentDate and yesterdayDate (default: the clock). */
  now?: Date;
}

/** Executes a parsed template on `data` (Ollama's option missingkey=zero); a runtime failure throws GoTemplateError. */
export function executeGoTemplate(t: ParsedTemplate, data: unknown, opts: ExecOptions = {}, root: Node[] = t.root): string {
  const ex = new Executor(t, opts);
  const out: string[] = [];
  ex.vars = [{ name: "$", value: data }];
  ex.walkList(out, data, root);
  return out.join("");
}

interface Var {
  name: string;
  value: unknown;
}

class Executor {
  vars: Var[] = [];
  private depth = 0;

  constructor(
    private readonly t: ParsedTemplate,
    private readonly opts: ExecOptions,
  ) {}

  private fail(msg: string, at: number): never {
    throw new GoTemplateError(msg, at, "exec", this.t.source);
  }

  walkList(out: string[], dot: unknown, nodes: Node[]): void {
    for (const n of nodes) this.walk(out, dot, n);
  }

  private walk(out: string[], dot: unknown, n: Node): void {
    switch (n.type) {
      case "text":
        out.push(n.text);
        return;
      case "action": {
        const v = this.pipe(dot, n.pipe);
        if (n.pipe.decl.length === 0) out.push(this.print(v));
        return;
      }
      case "if":
      case "with": {
        const mark = this.vars.length;
        const v = this.pipe(dot, n.pipe);
        if (truth(v)) this.walkList(out, n.type === "with" ? v : dot, n.list);
        else if (n.elseList) this.walkList(out, dot, n.elseList);
        this.vars.length = mark;
        return;
      }
      case "range":
        return this.range(out, dot, n);
      case "break":
        throw new Break();
      case "continue":
        throw new Continue();
      case "template": {
        const body = this.t.defines.get(n.name);
        if (!body) this.fail(`no such template "${n.name}"`, n.pos);
        if (++this.depth > 100) this.fail("exceeded maximum template depth (100)", n.pos);
        const v = n.pipe ? this.pipe(dot, n.pipe) : null;
        const saved = this.vars;
        this.vars = [{ name: "$", value: v }];
        this.walkList(out, v, body);
        this.vars = saved;
        this.depth--;
        return;
      }
    }
  }

  private range(out: string[], dot: unknown, n: RangeNode): void {
    const mark = this.vars.length;
    const v = this.pipe(dot, n.pipe);
    // the pipeline declared its variables; each iteration sets them
    this.vars.length = mark;
    const one = (key: unknown, elem: unknown): boolean => {
      if (n.pipe.decl.length === 1) this.vars.push({ name: n.pipe.decl[0]!, value: elem });
      else if (n.pipe.decl.length === 2) this.vars.push({ name: n.pipe.decl[0]!, value: key }, { name: n.pipe.decl[1]!, value: elem });
      try {
        this.walkList(out, elem, n.list);
      } catch (e) {
        if (e instanceof Break) return false;
        if (!(e instanceof Continue)) throw e;
      } finally {
        this.vars.length = mark; // what the body declared ends with the iteration
      }
      return true;
    };
    let any = false;
    const val = unwrap(v);
    if (Array.isArray(val)) {
      for (let i = 0; i < val.length; i++) {
        any = true;
        if (!one(i, val[i])) break;
      }
    } else if (val instanceof GoMap) {
      for (const k of val.keys()) {
        any = true;
        if (!one(k, val.entries.get(k))) break;
      }
    } else if (typeof val === "number" && Number.isInteger(val)) {
      for (let i = 0; i < val; i++) {
        any = true;
        if (!one(i, i)) break;
      }
    } else if (val === null || val === NO_VALUE) {
      // nil: nothing to range over
    } else this.fail(`range can't iterate over ${this.print(v)}`, n.pos);
    if (!any && n.elseList) this.walkList(out, dot, n.elseList);
    this.vars.length = mark;
  }

  private pipe(dot: unknown, p: PipeNode): unknown {
    let value: unknown = undefined;
    let first = true;
    for (const c of p.cmds) {
      value = this.command(dot, c, first ? undefined : { v: value });
      first = false;
    }
    for (const d of p.decl) {
      if (p.isAssign) {
        const v = [...this.vars].reverse().find((x) => x.name === d);
        if (!v) this.fail(`undefined variable: ${d}`, p.pos);
        v.value = value;
      } else this.vars.push({ name: d, value });
    }
    return value;
  }

  /** One command; `final` is the previous command's result (the last argument of a function). */
  private command(dot: unknown, c: CommandNode, final?: { v: unknown }): unknown {
    const head = c.args[0]!;
    if (head.type === "identifier") return this.call(dot, head.name, c.args.slice(1), final, head.pos);
    if (c.args.length > 1 || final) {
      // a method with arguments (Ollama's values have none that take any)
      if (head.type === "field" || head.type === "variable" || head.type === "chain") this.fail(`${describe(head)} has arguments but cannot be invoked as function`, head.pos);
      this.fail(`can't give argument to non-function ${describe(head)}`, head.pos);
    }
    return this.arg(dot, head);
  }

  private arg(dot: unknown, a: Arg): unknown {
    switch (a.type) {
      case "dot":
        return dot;
      case "field":
        return this.chain(dot, a.ident, a.pos);
      case "variable": {
        const v = [...this.vars].reverse().find((x) => x.name === a.ident[0]);
        if (!v) this.fail(`undefined variable: ${a.ident[0]}`, a.pos);
        return this.chain(v.value, a.ident.slice(1), a.pos);
      }
      case "chain":
        return this.chain(this.arg(dot, a.node), a.field, a.pos);
      case "pipe": {
        const mark = this.vars.length;
        const v = this.pipe(dot, a);
        this.vars.length = mark;
        return v;
      }
      case "identifier":
        return this.call(dot, a.name, [], undefined, a.pos);
      case "string":
        return a.value;
      case "number":
        return a.float ? new GoFloat(a.value) : a.value;
      case "bool":
        return a.value;
      case "nil":
        this.fail("nil is not a command", a.pos);
    }
  }

  private chain(v: unknown, fields: string[], pos: number): unknown {
    for (const f of fields) v = this.field(v, f, pos);
    return v;
  }

  private field(v: unknown, name: string, pos: number): unknown {
    if (v instanceof GoStruct) {
      if (name in v.fields) return v.fields[name];
      const m = v.opts.methods?.[name];
      if (m) return m();
      this.fail(`can't evaluate field ${name} in type ${v.typeName}`, pos);
    }
    if (v instanceof GoMap) return v.entries.has(name) ? v.entries.get(name) : NO_VALUE;
    if (v === null || v === undefined || v === NO_VALUE) this.fail(`nil pointer evaluating interface {}.${name}`, pos);
    return this.fail(`can't evaluate field ${name} in type ${goType(v)}`, pos);
  }

  private call(dot: unknown, name: string, args: Arg[], final: { v: unknown } | undefined, pos: number): unknown {
    // and/or evaluate their arguments lazily (Go 1.18)
    if (name === "and" || name === "or") {
      const thunks = args.map((a) => () => this.arg(dot, a));
      if (final) thunks.push(() => final.v);
      if (thunks.length === 0) this.fail(`wrong number of args for ${name}: want at least 1 got 0`, pos);
      let v: unknown;
      for (const th of thunks) {
        v = th();
        if (truth(v) === (name === "or")) return v;
      }
      return v;
    }
    const vals = args.map((a) => this.arg(dot, a));
    if (final) vals.push(final.v);
    try {
      return builtin(name, vals, this.opts);
    } catch (e) {
      if (e instanceof Error && !(e instanceof GoTemplateError)) this.fail(`error calling ${name}: ${e.message}`, pos);
      throw e;
    }
  }

  print(v: unknown): string {
    if (v === NO_VALUE || v === undefined) return "<no value>";
    return fmtValue(v, 0);
  }
}

function describe(a: Arg): string {
  if (a.type === "field") return "." + a.ident.join(".");
  if (a.type === "variable") return [a.ident[0], ...a.ident.slice(1)].join(".");
  return a.type;
}

function unwrap(v: unknown): unknown {
  return v instanceof GoFloat ? v.value : v;
}

function goType(v: unknown): string {
  if (typeof v === "string") return "string";
  if (typeof v === "number") return "int";
  if (v instanceof GoFloat) return "float64";
  if (typeof v === "boolean") return "bool";
  if (Array.isArray(v)) return "[]interface {}";
  return "interface {}";
}

/** text/template's truth: false, 0, nil, and empty strings, slices and maps are false; structs are true. */
export function truth(v: unknown): boolean {
  v = unwrap(v);
  if (v === null || v === undefined || v === NO_VALUE || v === false || v === 0 || v === "") return false;
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof GoMap) return v.entries.size > 0;
  return true;
}

// ---------------------------------------------------------------- printing (fmt's %v)

/** A float64 as fmt's %v prints it: strconv's shortest 'g', an exponent from 1e+06 up and below 1e-04. */
export function formatFloat(n: number): string {
  if (Number.isNaN(n)) return "NaN";
  if (!Number.isFinite(n)) return n > 0 ? "+Inf" : "-Inf";
  if (n === 0) return Object.is(n, -0) ? "-0" : "0";
  const [mant, ex] = n.toExponential().split("e"); // the shortest digits that read back
  const x = Number(ex);
  if (x < -4 || x >= 6) return `${mant}e${x < 0 ? "-" : "+"}${String(Math.abs(x)).padStart(2, "0")}`;
  return String(n); // JavaScript writes these without an exponent too
}

function fmtValue(v: unknown, depth: number): string {
  if (v === NO_VALUE || v === undefined) return depth === 0 ? "<no value>" : "<nil>";
  if (v === null) return "<nil>";
  if (typeof v === "string") return v;
  if (typeof v === "number") return String(v);
  if (typeof v === "boolean") return String(v);
  if (v instanceof GoFloat) return formatFloat(v.value);
  if (Array.isArray(v)) {
    const s = (v as GoSlice).stringer;
    if (s) return s();
    return `[${v.map((x) => fmtValue(x, depth + 1)).join(" ")}]`;
  }
  if (v instanceof GoMap) {
    if (v.stringer) return v.stringer();
    return `map[${[...v.entries.keys()].sort(compareBytes).map((k) => `${k}:${fmtValue(v.entries.get(k), depth + 1)}`).join(" ")}]`;
  }
  if (v instanceof GoStruct) {
    if (v.opts.stringer) return v.opts.stringer();
    return `{${Object.values(v.fields).map((x) => fmtValue(x, depth + 1)).join(" ")}}`;
  }
  return String(v);
}

// ---------------------------------------------------------------- JSON as Go's encoding/json writes it

/** What json.Marshal writes: map keys sorted, struct fields in order, <, >, & and U+2028/9 escaped. */
export function goJson(v: unknown): string {
  const text = JSON.stringify(jsonShape(v)) ?? "null";
  return text.replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function jsonShape(v: unknown): unknown {
  if (v === NO_VALUE || v === undefined) return null;
  if (v instanceof GoFloat) return v.value;
  if (Array.isArray(v)) return (v as GoSlice).nil ? null : v.map(jsonShape);
  if (v instanceof GoMap) {
    if (v.nil) return null;
    const o: Record<string, unknown> = {};
    for (const k of v.keys()) o[k] = jsonShape(v.entries.get(k));
    return o;
  }
  if (v instanceof GoStruct) {
    if (v.opts.json) return v.opts.json();
    const o: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v.fields)) o[k] = jsonShape(x);
    return o;
  }
  return v;
}

// ---------------------------------------------------------------- functions

function builtin(name: string, a: unknown[], opts: ExecOptions): unknown {
  const want = (n: number) => {
    if (a.length !== n) throw new Error(`wrong number of args for ${name}: want ${n} got ${a.length}`);
  };
  switch (name) {
    case "not":
      want(1);
      return !truth(a[0]);
    case "len": {
      want(1);
      const v = unwrap(a[0]);
      if (typeof v === "string") return Buffer.byteLength(v);
      if (Array.isArray(v)) return v.length;
      if (v instanceof GoMap) return v.entries.size;
      throw new Error(`len of ${v === null || v === NO_VALUE ? "nil pointer" : `type ${goType(v)}`}`);
    }
    case "index": {
      if (a.length < 1) throw new Error("wrong number of args for index: want at least 1 got 0");
      let v = a[0];
      for (const ix of a.slice(1)) {
        const x = unwrap(v);
        if (Array.isArray(x) || typeof x === "string") {
          const i = unwrap(ix);
          if (typeof i !== "number" || !Number.isInteger(i)) throw new Error(`cannot index slice/array with type ${goType(ix)}`);
          const len = typeof x === "string" ? Buffer.byteLength(x) : x.length;
          if (i < 0 || i >= len) throw new Error(`index out of range: ${i}`);
          v = typeof x === "string" ? Buffer.from(x)[i] : x[i];
        } else if (x instanceof GoMap) {
          if (typeof ix !== "string") throw new Error(`value has type ${goType(ix)}; should be string`);
          v = x.entries.has(ix) ? x.entries.get(ix) : NO_VALUE;
        } else if (x === null || x === NO_VALUE) throw new Error("index of untyped nil");
        else throw new Error(`can't index item of type ${goType(x)}`);
      }
      return v;
    }
    case "slice": {
      if (a.length < 1 || a.length > 4) throw new Error(`wrong number of args for slice`);
      const x = unwrap(a[0]);
      const idx = a.slice(1).map((i) => {
        const n = unwrap(i);
        if (typeof n !== "number" || !Number.isInteger(n)) throw new Error("cannot index slice/array with nil");
        return n;
      });
      if (typeof x === "string") {
        if (idx.length > 2) throw new Error("cannot 3-index slice a string");
        const b = Buffer.from(x);
        const [i = 0, j = b.length] = idx;
        if (i < 0 || j < i || j > b.length) throw new Error(`index out of range: ${j > b.length ? j : i}`);
        return b.subarray(i, j).toString();
      }
      if (Array.isArray(x)) {
        const [i = 0, j = x.length] = idx;
        if (i < 0 || j < i || j > x.length) throw new Error(`index out of range: ${j > x.length ? j : i}`);
        return x.slice(i, j);
      }
      throw new Error(`can't slice item of type ${goType(x)}`);
    }
    case "eq": {
      if (a.length < 2) throw new Error("missing argument for comparison");
      return a.slice(1).some((b) => compare(a[0], b, "eq") === 0);
    }
    case "ne":
      want(2);
      return compare(a[0], a[1], "eq") !== 0;
    case "lt":
      want(2);
      return compare(a[0], a[1], "lt") < 0;
    case "le":
      want(2);
      return compare(a[0], a[1], "lt") <= 0;
    case "gt":
      want(2);
      return compare(a[0], a[1], "lt") > 0;
    case "ge":
      want(2);
      return compare(a[0], a[1], "lt") >= 0;
    case "print":
      return sprint(a);
    case "println":
      return a.map((x) => fmtValue(x, 1)).join(" ") + "\n";
    case "printf":
      if (typeof a[0] !== "string") throw new Error("printf: format must be a string");
      return sprintf(a[0], a.slice(1));
    case "html":
      return sprint(a).replace(/[&'<>"\0]/g, (c) => ({ "&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "\0": "\uFFFD" })[c]!);
    case "js":
      return sprint(a).replace(/[\\'"<>&=`\n\r\t]/g, (c) => ({ "\\": "\\\\", "'": "\\'", '"': '\\"', "<": "\\u003C", ">": "\\u003E", "&": "\\u0026", "=": "\\u003D", "`": "\\u0060", "\n": "\\u000A", "\r": "\\u000D", "\t": "\\u0009" })[c]!);
    case "urlquery":
      return encodeURIComponent(sprint(a)).replace(/%20/g, "+").replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
    case "call":
      throw new Error("call: no function values in Ollama's template data");
    case "json":
      want(1);
      return goJson(a[0]);
    case "currentDate":
    case "yesterdayDate": {
      const now = opts.now ?? new Date();
      const d = new Date(now.getFullYear(), now.getMonth(), now.getDate() - (name === "yesterdayDate" ? 1 : 0));
      return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, "0")}-${String(d.getDate()).padStart(2, "0")}`;
    }
    case "toTypeScriptType": {
      want(1);
      const v = a[0];
      return v instanceof GoStruct && v.opts.methods?.ToTypeScriptType ? v.opts.methods.ToTypeScriptType() : "any";
    }
  }
  throw new Error(`function "${name}" not defined`);
}

/** fmt.Sprint: a space between operands when neither is a string. */
function sprint(a: unknown[]): string {
  let s = "";
  a.forEach((x, i) => {
    if (i > 0 && typeof x !== "string" && typeof a[i - 1] !== "string") s += " ";
    s += fmtValue(x, 1);
  });
  return s;
}

/** fmt.Sprintf for the verbs templates use: %s %v %d %q %t %f %x %%; widths and precision on numbers and strings. */
function sprintf(format: string, args: unknown[]): string {
  let i = 0;
  return format.replace(/%([-+# 0]*)(\d+)?(?:\.(\d+))?([a-zA-Z%])/g, (_m, flags: string, width?: string, prec?: string, verb?: string) => {
    if (verb === "%") return "%";
    if (i >= args.length) return `%!${verb}(MISSING)`;
    const v = args[i++];
    const x = unwrap(v);
    let s: string;
    switch (verb) {
      case "d":
        s = typeof x === "number" ? String(Math.trunc(x)) : `%!d(${goType(v)}=${fmtValue(v, 1)})`;
        break;
      case "f":
        s = typeof x === "number" ? x.toFixed(prec === undefined ? 6 : Number(prec)) : `%!f(${goType(v)}=${fmtValue(v, 1)})`;
        break;
      case "q":
        s = typeof x === "string" ? JSON.stringify(x) : fmtValue(v, 1);
        break;
      case "x":
        s = typeof x === "number" ? x.toString(16) : Buffer.from(fmtValue(v, 1)).toString("hex");
        break;
      case "t":
        s = typeof x === "boolean" ? String(x) : `%!t(${goType(v)}=${fmtValue(v, 1)})`;
        break;
      default:
        s = fmtValue(v, 1);
        if (prec !== undefined && verb === "s") s = [...s].slice(0, Number(prec)).join("");
    }
    if (width !== undefined && s.length < Number(width)) s = flags.includes("-") ? s.padEnd(Number(width)) : s.padStart(Number(width), flags.includes("0") && verb !== "s" ? "0" : " ");
    return s;
  }) + (i < args.length ? `%!(EXTRA ${args.slice(i).map((v) => `${goType(v)}=${fmtValue(v, 1)}`).join(", ")})` : "");
}

/** Go's eq/lt on basic kinds: numbers with numbers, strings with strings, bools for eq; anything else is an error. */
function compare(a: unknown, b: unknown, op: "eq" | "lt"): number {
  const x = unwrap(a);
  const y = unwrap(b);
  if (typeof x === "number" && typeof y === "number") return x < y ? -1 : x > y ? 1 : 0;
  if (typeof x === "string" && typeof y === "string") return x < y ? -1 : x > y ? 1 : 0;
  if (op === "eq") {
    if (typeof x === "boolean" && typeof y === "boolean") return x === y ? 0 : 1;
    if ((x === null || x === NO_VALUE) && (y === null || y === NO_VALUE)) return 0;
    if (x === null || y === null) return 1; // nil against a value: unequal
    if (x === NO_VALUE || y === NO_VALUE) throw new Error("invalid type for comparison");
  } else if (typeof x === "boolean" || x === null || x === NO_VALUE) throw new Error("invalid type for comparison");
  throw new Error("incompatible types for comparison");
}
