import type { Token } from "node-llama-cpp";
import { llamaErrorText, withLlamaLogs } from "./shared-llama";

export interface LoadAndGenerateOptions {
  /** Text to feed the model. Default "Hello". */
  prompt?: string;
  /** Tokens to generate greedily (ignored with `embedding`). Default 4. */
  maxTokens?: number;
  /** Compute an embedding of the prompt instead of generating text. */
  embedding?: boolean;
  /** Context size to create. Default 128: fixtures are tiny and so are prompts. */
  contextSize?: number;
}

export type LoadResult =
  | {
      ok: true;
      /** Generated token ids; with `embedding`, the prompt's token ids. */
      tokens: number[];
      /** Detokenised `tokens` (empty with `embedding`). */
      text: string;
      embedding?: number[];
    }
  | {
      ok: false;
      /** llama.cpp's own error lines, or the thrown message when it logged none. */
      error: string;
      /** Every llama.cpp log line of the attempt, for debugging. */
      log?: string[];
    };

/**
 * Loads a GGUF with the prebuilt llama.cpp bundled in node-llama-cpp and
 * greedily generates a few tokens (or embeds the prompt). Runs in this
 * process: a file that makes llama.cpp abort() kills the process, so tests on
 * untrusted bytes should use runLoaderInSubprocess instead.
 * Generation does not stop at end-of-generation tokens: tiny random models
 * emit them at random, and the raw greedy ids are what a test compares.
 */
export function loadAndGenerate(path: string, options: LoadAndGenerateOptions = {}): Promise<LoadResult> {
  const { prompt = "Hello", maxTokens = 4, embedding = false, contextSize = 128 } = options;
  return withLlamaLogs<LoadResult>(async (llama, logs) => {
    const disposers: Array<() => Promise<void>> = [];
    try {
      const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
      disposers.push(() => model.dispose());

      if (embedding) {
        const context = await model.createEmbeddingContext({ contextSize, threads: 1 });
        disposers.push(() => context.dispose());
        const tokens = model.tokenize(prompt);
        const result = await context.getEmbeddingFor(tokens);
        return { ok: true, tokens: [...tokens], text: "", embedding: [...result.vector] };
      }

      const context = await model.createContext({ contextSize, batchSize: contextSize, threads: 1 });
      disposers.push(() => context.dispose());
      const sequence = context.getSequence();
      const input = model.tokenize(prompt);
      const bos = model.tokens.bos;
      if (bos != null && model.tokens.shouldPrependBosToken && input[0] !== bos) input.unshift(bos);

      const tokens: number[] = [];
      if (maxTokens > 0) {
        for await (const token of sequence.evaluate(input, { temperature: 0 })) {
          tokens.push(token);
          if (tokens.length >= maxTokens) break;
        }
      }
      return { ok: true, tokens, text: model.detokenize(tokens as Token[]) };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      // llama.cpp's log lines reach JS asynchronously and can trail the exception: give the
      // error lines a moment to arrive (under load they lag), so the error names the cause.
      for (let i = 0; i < 20 && llamaErrorText(logs, "") === ""; i++) await new Promise((r) => setTimeout(r, 50));
      return {
        ok: false,
        error: llamaErrorText(logs, message),
        log: logs.map((line) => `${line.level}: ${line.message}`),
      };
    } finally {
      for (const dispose of disposers.reverse()) await dispose().catch(() => undefined);
    }
  });
}
