import type { ModelFacts } from "./models";
import type { OllamaTemplate, TemplateValues } from "./ollama-template";
import { completionDecoder, type Decoder, type Finish, type Piece } from "./stream";
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
 * /completion's stream for a chat: with tools, the text goes through Ollama's tools parser keyed
 * on the template's tool-call tag, so calls leave as `tool_calls` (each as it completes) and the
 * rest as content; what the parser still holds at the end is content when it held no call.
 */
export function renderedChatDecoder(t: OllamaTemplate, tools: unknown[] | undefined): () => Decoder {
  if (!tools || tools.length === 0) return completionDecoder;
  return () => {
    const inner = completionDecoder();
    const parser = new ToolCallParser(t.toolTag, tools);
    return (event, emit) =>
      inner(event, (p: Piece | Finish) => {
        if (p.done) {
          const rest = parser.rest();
          if (rest) emit({ done: false, content: rest, thinking: "" });
          emit(p);
          return;
        }
        const { calls, content } = parser.add(p.content);
        if (content) emit({ done: false, content, thinking: "" });
        if (calls.length > 0) emit({ done: false, content: "", thinking: "", toolCalls: calls });
      });
  };
}
