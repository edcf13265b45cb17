import type { ModelFacts } from "./models";
import type { OllamaTemplate, TemplateValues } from "./ollama-template";
import { completionDecoder, type Decoder, type Finish, type Piece } from "./stream";
import { ThinkingParser } from "./thinking";
import { ToolCallParser } from "./tool-calls";

type Json = Record<string, unknown>;

/**
 * The Go template a request is rendered with, where llama-server's own chat template cannot
 * serve it: the served GGUF has no chat template (llama-server would fall back to a generic
 * one), or the request has tools that the chat template does not take and the Go template does.
 * Otherwise undefined: llama-server renders with the GGUF's template, as before.
 */
export function goRenderingFor(facts: ModelFacts, hasTools: boolean): OllamaTemplate | undefined {
  const go = facts.goTemplate;
  if (!go) return undefined;
  if (!facts.servedHasChatTemplate) return go;
  return hasTools && !facts.chatTemplateTools && go.vars?.includes("tools") ? go : undefined;
}

/** Ollama's ThinkValue as the template sees it: Think, ThinkLevel ("medium" for true) and IsThinkSet. */
export function thinkValues(think: unknown): Pick<TemplateValues, "think" | "thinkLevel" | "isThinkSet"> {
  if (think === undefined || think === null) return { think: false, thinkLevel: "", isThinkSet: false };
  if (typeof think === "string") return { think: ["high", "medium", "low", "max"].includes(think), thinkLevel: think, isThinkSet: true };
  return { think: think === true, thinkLevel: think === true ? "medium" : "", isThinkSet: true };
}

/** The rendered prompt as llama-server's /completion takes it: Ollama's `[img-N]` tags become its media markers, with the images in order. */
export function promptField(prompt: string, images: string[]): string | Json {
  if (images.length === 0) return prompt;
  return { prompt_string: prompt.replace(/\[img-\d+\]/g, "<__media__>"), multimodal_data: images };
}

/**
 * /completion's stream of a rendered request. When thinking is on and the template shows its
 * trace's tags, the trace at the start of the output is split off as `thinking` (the prompt may
 * already end with the opening tag). With tools, the rest goes through Ollama's tools parser
 * keyed on the template's tool-call tag, so calls leave as `tool_calls` (each as it completes)
 * and the rest as content; what the parser still holds at the end is content when it held no call.
 */
export function renderedDecoder(t: OllamaTemplate, prompt: string, think: boolean, tools: unknown[] | undefined): () => Decoder {
  const [open, close] = t.thinking;
  const thinks = think && open !== "" && close !== "";
  const hasTools = tools !== undefined && tools.length > 0;
  if (!thinks && !hasTools) return completionDecoder;
  return () => {
    const inner = completionDecoder();
    const thinking = thinks ? new ThinkingParser(open, close) : undefined;
    if (thinking && prompt.trimEnd().endsWith(open)) thinking.add(open);
    const calls = hasTools ? new ToolCallParser(t.toolTag, tools) : undefined;
    return (event, emit) =>
      inner(event, (p: Piece | Finish) => {
        if (p.done) {
          const rest = calls?.rest();
          if (rest) emit({ done: false, content: rest, thinking: "" });
          emit(p);
          return;
        }
        const split = thinking ? thinking.add(p.content) : { thinking: "", content: p.content };
        const parsed = calls ? calls.add(split.content) : { calls: [], content: split.content };
        if (parsed.content || split.thinking) emit({ done: false, content: parsed.content, thinking: split.thinking });
        if (parsed.calls.length > 0) emit({ done: false, content: "", thinking: "", toolCalls: parsed.calls });
      });
  };
}
