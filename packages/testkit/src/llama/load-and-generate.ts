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
  /**
   * Also return, for every generated token, the `topProbabilities` most likely next tokens
   * and their probabilities (softmax of the raw logits). A test that claims two files compute
   * differently compares these (see probabilityDistance), not greedy tokens: an argmax can
   * agree or differ on a near-tie, a distribution shows by how much the files differ.
   */
  topProbabilities?: number;
}

/** The most likely next tokens at one generation step, most likely first. */
export type StepProbabilities = Array<[token: number, probability: number]>;

export type LoadResult =
  | {
      ok: true;
      /** Generated token ids; with `embedding`, the prompt's token ids. */
      tokens: number[];
      /** Detokenised `tokens` (empty with `embedding`). */
      text: string;
      embedding?: number[];
      /** With `topProbabilities`: one entry per generated token. */
      steps?: StepProbabilities[];
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
  const { prompt = "Hello", maxTokens = 4, embedding = false, contextSize = 128, topProbabilities } = options;
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
      const steps: StepProbabilities[] = [];
      if (maxTokens > 0 && topProbabilities) {
        for await (const step of sequence.evaluateWithMetadata(input, { probabilities: true }, { temperature: 0 })) {
          tokens.push(step.token);
          steps.push([...step.probabilities.entries()].slice(0, topProbabilities));
          if (tokens.length >= maxTokens) break;
        }
      } else if (maxTokens > 0) {
        for await (const token of sequence.evaluate(input, { temperature: 0 })) {
          tokens.push(token);
          if (tokens.length >= maxTokens) break;
        }
      }
      const text = model.detokenize(tokens as Token[]);
      return topProbabilities ? { ok: true, tokens, text, steps } : { ok: true, tokens, text };
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

/**
 * How differently two runs score the next token: the largest change of a top token's
 * log-probability over the steps both have, less the change common to all of them (so
 * a different vocabulary size, which only renormalises, counts as no change). Only
 * tokens in both sides' top lists count; with fewer than 8 in common the runs are
 * unrelated and the distance is Infinity. Rounding moves it by about 1e-5; a change in
 * what a model computes (weights, RoPE, attention scale, prompt tokens), by far more.
 */
export function logitDistance(a: readonly StepProbabilities[], b: readonly StepProbabilities[]): number {
  let worst = 0;
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const q = new Map(b[i]);
    const shifts: number[] = [];
    for (const [token, p] of a[i]!) {
      const other = q.get(token);
      if (other !== undefined && p > 0 && other > 0) shifts.push(Math.log(p) - Math.log(other));
    }
    if (shifts.length < 8) return Infinity;
    const common = shifts.reduce((x, y) => x + y, 0) / shifts.length;
    for (const s of shifts) worst = Math.max(worst, Math.abs(s - common));
  }
  return worst;
}
