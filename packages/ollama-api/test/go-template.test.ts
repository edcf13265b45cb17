import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { executeGoTemplate, formatFloat, GoMap, GoTemplateError, goJson, parseGoTemplate, templateVars } from "../src/go-template";
import { ollamaTemplate, renderOllamaTemplate, templateCapabilities } from "../src/ollama-template";
import { ThinkingParser } from "../src/thinking";
import { ToolCallParser } from "../src/tool-calls";

/**
 * Go's text/template as Ollama runs its TEMPLATE layers. The fixtures in templates/ are the
 * template texts Ollama publishes (ollama.com's llama3.1, qwen2.5, phi4-mini, gemma3:270m;
 * mistral from Ollama's docs/template.md, qwen3 from its thinking/template_test.go; chatml, llama3-instruct and command-r from Ollama's
 * template/ folder, with the outputs Go wrote for them in go-outputs.json). The expected prompts
 * for the tool conversations were worked out by hand from Go's semantics: trim markers, `else
 * if` nesting, variable scope, printing a struct without String() as `{f1 f2}`, and JSON as
 * encoding/json writes it (map keys sorted, struct fields in order).
 */
const fixture = (name: string) => readFileSync(join(__dirname, "templates", name), "utf8");
const goOutputs = JSON.parse(fixture("go-outputs.json")) as Record<string, Record<string, string>>;

const render = (text: string, data: Record<string, unknown>) => executeGoTemplate(parseGoTemplate(text), new GoMap(new Map(Object.entries(data))));

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the weather",
    parameters: { type: "object", properties: { city: { type: "string", description: "The city" } }, required: ["city"] },
  },
};
const toolsJson = '[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","required":["city"],"properties":{"city":{"type":"string","description":"The city"}}}}}]';
const conversation = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
  { role: "tool", content: "22C", tool_name: "get_weather" },
];

describe("Ollama's published templates", () => {
  it.each(Object.keys(goOutputs))("%s renders what Go rendered for Ollama's template tests", (name) => {
    const t = ollamaTemplate(fixture(`${name}.gotmpl`));
    const user = { role: "user", content: "Hello, how are you?" };
    const assistant = { role: "assistant", content: "I'm doing great. How can I help you today?" };
    const again = { role: "user", content: "I'd like to show off how chat templating works!" };
    const system = { role: "system", content: "You are a helpful assistant." };
    expect(renderOllamaTemplate(t, { messages: [user] })).toBe(goOutputs[name]!.user);
    expect(renderOllamaTemplate(t, { messages: [user, assistant, again] })).toBe(goOutputs[name]!["user-assistant-user"]);
    expect(renderOllamaTemplate(t, { messages: [system, user, assistant, again] })).toBe(goOutputs[name]!["system-user-assistant-user"]);
  });

  it("llama3.1: a tool call and its result, and the tools before the last user message", () => {
    const t = ollamaTemplate(fixture("llama3.1.gotmpl"));
    const head = "<|start_header_id|>system<|end_header_id|>";
    const toolsNote = "\n\nYou are a helpful assistant with tool calling capabilities. When you receive a tool call response, use the output to format an answer to the original use question.";
    expect(renderOllamaTemplate(t, { messages: conversation, tools: [weather] })).toBe(
      `${head}\n\nBe brief.${toolsNote}<|eot_id|>` +
        "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>" +
        '<|start_header_id|>assistant<|end_header_id|>{"name": "get_weather", "parameters": {"city":"Paris"}}' +
        "<|start_header_id|>ipython<|end_header_id|>\n\n22C<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    expect(renderOllamaTemplate(t, { messages: [{ role: "user", content: "Weather in Paris?" }], tools: [weather] })).toBe(
      `${head}${toolsNote}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n` +
        `Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\n\n${toolsJson}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n`,
    );
    expect(templateCapabilities(t)).toEqual(["tools"]);
    expect(t.toolTag).toBe("{");
  });

  it("qwen2.5: `{{ .Function }}` prints the struct as Go's fmt does (templateToolFunction has no String method)", () => {
    const t = ollamaTemplate(fixture("qwen2.5.gotmpl"));
    const fn = '{get_weather Get the weather {object <nil> <nil> [city] {"city":{"type":"string","description":"The city"}}}}';
    expect(renderOllamaTemplate(t, { messages: conversation, tools: [weather] })).toBe(
      "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
        `{"type": "function", "function": ${fn}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n` +
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call><|im_end|>\n' +
        "<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    );
    expect(t.toolTag).toBe("<tool_call>");
    expect(templateCapabilities(t)).toEqual(["tools"]);
  });

  it("mistral: tools (json $.Tools) with the last user turn, the system prompt there too", () => {
    const t = ollamaTemplate(fixture("mistral.gotmpl"));
    const messages = [...conversation, { role: "user", content: "Thanks. And Rome?" }];
    expect(renderOllamaTemplate(t, { messages, tools: [weather] })).toBe(
      '[INST] Weather in Paris?[/INST][TOOL_CALLS] [{"name": "get_weather", "arguments": {"city":"Paris"}}]</s>[TOOL_RESULTS] {"content": 22C}[/TOOL_RESULTS]' +
        `[AVAILABLE_TOOLS] ${toolsJson}[/AVAILABLE_TOOLS][INST] Be brief.\n\nThanks. And Rome?[/INST]`,
    );
    expect(t.toolTag).toBe("[TOOL_CALLS] [");
  });

  it("phi4-mini: `{{ .Tools }}` is templateTools' String(), JSON", () => {
    const t = ollamaTemplate(fixture("phi4-mini.gotmpl"));
    expect(renderOllamaTemplate(t, { messages: [{ role: "user", content: "hi" }], tools: [weather] })).toBe(`<|system|>You are a helpful assistant with some tools.<|tool|>${toolsJson}<|/tool|><|end|><|user|>hi<|end|><|assistant|>`);
    // no tools: the system turn is not there at all, and nothing says "null"
    expect(renderOllamaTemplate(t, { messages: [{ role: "user", content: "hi" }] })).toBe("<|user|>hi<|end|><|assistant|>");
  });

  it("gemma3:270m: `$x = …` inside a range assigns the variable declared outside it", () => {
    const t = ollamaTemplate(fixture("gemma3-270m.gotmpl"));
    const messages = [
      { role: "system", content: "S" },
      { role: "user", content: "a" },
      { role: "assistant", content: "b" },
      { role: "user", content: "c" },
    ];
    expect(renderOllamaTemplate(t, { messages })).toBe("<start_of_turn>user\nS\n\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n<start_of_turn>user\nc<end_of_turn>\n<start_of_turn>model\n\n"); // the file's last newline
    expect(templateCapabilities(t)).toEqual([]);
  });

  it("a legacy template (.System/.Prompt, no .Response): one execution per turn, the appended .Response, the last cut after it", () => {
    const t = ollamaTemplate("<|system|>\n{{ .System }}</s>\n<|user|>\n{{ .Prompt }}</s>\n<|assistant|>\n");
    const messages = [
      { role: "system", content: "S" },
      { role: "user", content: "U1" },
      { role: "assistant", content: "A1" },
      { role: "user", content: "U2" },
    ];
    expect(renderOllamaTemplate(t, { messages })).toBe("<|system|>\nS</s>\n<|user|>\nU1</s>\n<|assistant|>\nA1<|system|>\n</s>\n<|user|>\nU2</s>\n<|assistant|>\n");
    // text after .Response is not part of the last turn
    const cut = ollamaTemplate("[{{ .Prompt }}]{{ .Response }}<end>{{ if .Prompt }}!{{ end }}");
    expect(renderOllamaTemplate(cut, { messages: [{ role: "user", content: "q" }, { role: "assistant", content: "r" }, { role: "user", content: "q2" }] })).toBe("[q]r<end>![q2]");
  });

  it("fill-in-the-middle: .Prompt and .Suffix alone; .Suffix gives insert", () => {
    const t = ollamaTemplate("{{- if .Suffix }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>{{ else }}{{ .Prompt }}{{ end }}");
    expect(renderOllamaTemplate(t, { messages: [], prompt: "def f(", suffix: "  return x" })).toBe("<PRE> def f( <SUF>  return x <MID>");
    expect(templateCapabilities(t)).toEqual(["insert"]);
  });

  it("collation: system messages joined as .System, runs of a role merged, tool messages kept apart; images are [img-N] tags", () => {
    const t = ollamaTemplate("{{ .System }}|{{ range .Messages }}{{ .Role }}:{{ .Content }};{{ end }}");
    const messages = [
      { role: "system", content: "a" },
      { role: "system", content: "b" },
      { role: "user", content: "u1" },
      { role: "user", content: "u2", images: ["aGk="] },
      { role: "tool", content: "t1" },
      { role: "tool", content: "t2" },
    ];
    expect(renderOllamaTemplate(t, { messages })).toBe("a\n\nb|system:a\n\nb;user:u1\n\n[img-0]u2;tool:t1;tool:t2;");
  });

  it("qwen3 (Ollama's thinking test): the trace's tags are <think> and </think>, the tool-call tag <tool_call>", () => {
    const t = ollamaTemplate(fixture("qwen3.gotmpl"));
    expect([t.thinking, t.toolTag, templateCapabilities(t)]).toEqual([["<think>", "</think>"], "<tool_call>", ["tools", "thinking"]]);
  });

  it("thinking: the tags around .Thinking inside the range over .Messages give the thinking capability", () => {
    const t = ollamaTemplate('{{ range .Messages }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}{{ end }}{{ if .Think }}on{{ end }}');
    expect(t.thinking).toEqual(["<think>", "</think>"]);
    expect(templateCapabilities(t)).toEqual(["thinking"]);
  });
});

describe("Go's text/template semantics", () => {
  it.each([
    ['{{ if and .A (not .B) }}y{{ else }}n{{ end }}', { A: 1, B: 0 }, "y"],
    ['{{ or .A .B "z" }}', { A: "", B: 0 }, "z"],
    ['{{ and .A .B }}', { A: "x", B: 0 }, "0"],
    ['{{ index .L 1 }}{{ len .L }}{{ slice "héllo" 1 3 }}', { L: ["a", "b"] }, "b2é"],
    ['{{ range $i, $v := .L }}{{ if eq $i 1 }}{{ continue }}{{ end }}{{ $i }}={{ $v }};{{ else }}none{{ end }}', { L: ["a", "b", "c"] }, "0=a;2=c;"],
    ['{{ range .L }}{{ if eq . "b" }}{{ break }}{{ end }}{{ . }}{{ end }}', { L: ["a", "b", "c"] }, "a"],
    ['{{ range .L }}x{{ else }}empty{{ end }}', { L: [] }, "empty"],
    ['{{ range 3 }}{{ . }}{{ end }}', {}, "012"],
    ['{{ with .A }}[{{ . }}]{{ else with .B }}<{{ . }}>{{ else }}-{{ end }}', { A: "", B: "b" }, "<b>"],
    ['{{ if eq .A 1 }}one{{ else if eq .A 2 }}two{{ else }}many{{ end }}', { A: 2 }, "two"],
    ['{{ printf "%s-%d-%v-%q" "a" 3 true "q" }}', {}, 'a-3-true-"q"'],
    ['{{ print 1 2 "x" 3 }}|{{ println "a" 1 }}', {}, "1 2x3|a 1\n"],
    ['{{ .Missing }}|{{ if .Missing }}y{{ else }}n{{ end }}', {}, "<no value>|n"],
    ['{{ "a" | printf "%s%s" "b" }}', {}, "ba"],
    ['{{ $x := "o" }}{{ if true }}{{ $x = "n" }}{{ $y := 1 }}{{ end }}{{ $x }}', {}, "n"],
    ['{{/* a comment */}}a {{- /* trimmed */ -}} b', {}, "ab"],
    ['{{ lt 1 2 }}{{ ge "b" "a" }}{{ ne 1 1 }}{{ eq "x" "y" "x" }}', {}, "truetruefalsetrue"],
    ['{{ define "t" }}<{{ . }}>{{ end }}{{ template "t" .A }}', { A: "x" }, "<x>"],
    ["{{ `raw\\n` }}{{ 'a' }}{{ 0x10 }}", {}, "raw\\n9716"],
    ['{{ json .M }}', { M: new GoMap(new Map<string, unknown>([["b", 1], ["a", "<&>"]])) }, '{"a":"\\u003c\\u0026\\u003e","b":1}'],
  ])("%s", (text, data, want) => {
    expect(render(text, data)).toBe(want);
  });

  it("floats print as fmt's %v: shortest digits, an exponent from 1e+06", () => {
    expect([1, 0.5, 123456, 1e6, 1234567, 1e-5, 0.0001, -2.5e21].map(formatFloat)).toEqual(["1", "0.5", "123456", "1e+06", "1.234567e+06", "1e-05", "0.0001", "-2.5e+21"]);
  });

  it("Vars: field and variable chains lower-cased, as Ollama's Identifiers collects them ($.Tools counts; a chain on a parenthesized value does not)", () => {
    expect(templateVars(parseGoTemplate("{{ if $.Tools }}{{ range .Messages }}{{ .Function.Name }}{{ end }}{{ end }}{{ (json .X).Y }}{{ print (.Z) }}"))).toEqual(["$", "function", "messages", "name", "tools", "z"]);
  });

  it.each([
    ["{{ if .A }}x", "unexpected EOF", 12],
    ["ab {{ .A ", "unclosed action", 3],
    ["{{ nope .A }}", 'function "nope" not defined', 3],
    ["{{ end }}", "unexpected {{end}}", 3],
    ["{{ $x }}", 'undefined variable "$x"', 3],
    ["{{ .A | }}", "missing command after |", 8],
    ['{{ "abc }}', "unterminated quoted string", 3],
    ["{{ break }}", "{{break}} outside {{range}}", 3],
  ])("%j is refused with a typed error at its offset", (text, reason, offset) => {
    let err: unknown;
    try {
      parseGoTemplate(text);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(GoTemplateError);
    expect((err as GoTemplateError).reason).toBe(reason);
    expect((err as GoTemplateError).offset).toBe(offset);
    expect((err as GoTemplateError).message).toMatch(/^template: parse error at line 1, column \d+ \(offset \d+\)/);
  });

  it("execution errors are typed too: a field a struct does not have, a comparison of a string with a number", () => {
    const t = ollamaTemplate("{{ range .Messages }}{{ .Nope }}{{ end }}");
    expect(() => renderOllamaTemplate(t, { messages: [{ role: "user", content: "x" }] })).toThrow(/exec error.*can't evaluate field Nope in type \*template.templateMessage/);
    expect(() => render('{{ eq .A "1" }}', { A: 1 })).toThrow(GoTemplateError);
  });
});

describe("properties", () => {
  const noDelims = fc.string().filter((s) => !s.includes("{{"));

  it("text without actions is itself", () => {
    fc.assert(fc.property(noDelims, (s) => render(s, {}) === s));
  });

  it("trim markers remove exactly the white space next to them", () => {
    const ws = fc.stringMatching(/^[ \t\r\n]*$/);
    // `a` must not end in "{": with an empty w1 that brace and the action's "{{" read as "{{{", whose
    // first two braces open the action (as in Go's lexer), so "{- .X" would be a parse error there too.
    const before = noDelims.filter((s) => !s.endsWith("{"));
    fc.assert(
      fc.property(before, ws, fc.string(), ws, noDelims, (a, w1, x, w2, b) => {
        return render(`${a}${w1}{{- .X -}}${w2}${b}`, { X: x }) === a.replace(/[ \t\r\n]+$/, "") + x + b.replace(/^[ \t\r\n]+/, "");
      }),
    );
  });

  it("a string literal (Go-quoted) reads back as itself; len is its UTF-8 length; json is encoding/json's", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), (s) => {
        const lit = JSON.stringify(s); // a valid Go interpreted string for these characters
        const t = parseGoTemplate(`{{ ${lit} }}|{{ len ${lit} }}|{{ json .S }}`);
        return executeGoTemplate(t, new GoMap(new Map([["S", s]]))) === `${s}|${Buffer.byteLength(s)}|${goJson(s)}`;
      }),
    );
  });

  it("every field a template reads shows in its Vars, lower-cased", () => {
    const ident = fc.stringMatching(/^[A-Z][A-Za-z0-9_]{0,8}$/);
    fc.assert(
      fc.property(fc.array(fc.array(ident, { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 5 }), (chains) => {
        const text = chains.map((c) => `{{ if .${c.join(".")} }}x{{ end }}`).join("");
        const vars = templateVars(parseGoTemplate(text));
        return chains.flat().every((n) => vars.includes(n.toLowerCase()));
      }),
    );
  });
});

describe("tool calls in raw output (Ollama's tools parser)", () => {
  const tools = [weather, { type: "function", function: { name: "get_weather_hourly", parameters: { type: "object" } } }];

  it("after a tag: the calls, whatever pieces the text came in", () => {
    const text = 'Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: text.length - 1 }), { maxLength: 8 }), (cuts) => {
        const p = new ToolCallParser("<tool_call>", tools);
        const points = [...new Set(cuts)].sort((a, b) => a - b);
        let content = "";
        const calls = [];
        let at = 0;
        for (const c of [...points, text.length]) {
          const r = p.add(text.slice(at, c));
          at = c;
          content += r.content;
          calls.push(...r.calls);
        }
        content += p.rest();
        expect(calls).toEqual([{ function: { index: 0, name: "get_weather", arguments: { city: "Paris" } } }]);
        expect(content).toBe("Sure. ");
      }),
    );
  });

  it('with the "{" tag: JSON at the start is a call; text first means no calls at all', () => {
    const p = new ToolCallParser("{", tools);
    const r = p.add('{"name": "get_weather_hourly", "parameters": {"h": 3}} done.');
    expect(r.calls).toEqual([{ function: { index: 0, name: "get_weather_hourly", arguments: { h: 3 } } }]);
    const q = new ToolCallParser("{", tools);
    expect(q.add('It is {"name": "get_weather"}')).toEqual({ calls: [], content: 'It is {"name": "get_weather"}' });
  });
});

describe("a thinking trace in raw output (Ollama's thinking parser)", () => {
  const pieces = (text: string, cuts: number[]) => {
    const points = [...new Set(cuts.filter((c) => c > 0 && c < text.length))].sort((a, b) => a - b);
    return [...points, text.length].map((c, i, all) => text.slice(i === 0 ? 0 : all[i - 1], c));
  };
  const run = (text: string, cuts: number[]) => {
    const p = new ThinkingParser("<think>", "</think>");
    let thinking = "";
    let content = "";
    for (const piece of pieces(text, cuts)) {
      const r = p.add(piece);
      thinking += r.thinking;
      content += r.content;
    }
    return { thinking, content };
  };

  it("splits the trace from the answer, whatever pieces the text came in", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 40 }), { maxLength: 10 }), (cuts) => {
        expect(run("  <think>\n plan it </think>\n\nThe answer.", cuts)).toEqual({ thinking: "plan it ", content: "The answer." });
        expect(run("No trace <think>x</think>", cuts)).toEqual({ thinking: "", content: "No trace <think>x</think>" });
      }),
    );
  });
});
