import { describe, expect, it } from "vitest";
import { type PreparedModel } from "@compat/prepare";
import { builtinTemplateFor, llamaCanonicalName, modelArgs, presetName, presetSection } from "@compat/server-bridge";

function prepared(over: Partial<PreparedModel> = {}, resolved: Partial<PreparedModel["resolved"]> = {}): PreparedModel {
  return {
    resolved: { ref: "m:1", name: "m:1", kind: "store", modelPath: "/blobs/m", projectors: [], adapters: [], params: {}, size: 1, ...resolved },
    modelPath: "/cache/m.gguf",
    translated: true,
    cacheHit: false,
    status: "supported",
    handlers: ["llama3-metadata"],
    architecture: "llama",
    embedding: false,
    hasChatTemplate: true,
    ...over,
  };
}

describe("llama-server arguments (Ollama's llm/llama_server.go)", () => {
  it("model, default context, one slot", () => {
    expect(modelArgs(prepared())).toEqual(["--model", "/cache/m.gguf", "--ctx-size", "4096", "--parallel", "1"]);
  });

  it("params layer: context, batch, sampling defaults, stop words, mmap", () => {
    const args = modelArgs(
      prepared({}, { params: { num_ctx: 2048, num_batch: 256, temperature: 0.6, top_k: 20, top_p: 0.9, min_p: 0, repeat_penalty: 1.1, seed: 7, stop: ["<|eot_id|>", "###"], use_mmap: false, num_gpu: 0 } }),
    );
    expect(args.join(" ")).toBe(
      "--model /cache/m.gguf --ctx-size 2048 --parallel 1 --batch-size 256 --ubatch-size 256 --no-mmap --temp 0.6 --top-k 20 --top-p 0.9 --min-p 0 --repeat-penalty 1.1 --seed 7 --n-gpu-layers 0 --reverse-prompt <|eot_id|> --reverse-prompt ###",
    );
  });

  it("projector, adapters, embedding (batch capped at the context), Qwen-VL image tokens", () => {
    expect(modelArgs(prepared({ mmproj: "/p.gguf" }, { adapters: ["/a1", "/a2"] }))).toEqual(
      expect.arrayContaining(["--mmproj", "/p.gguf", "--lora", "/a1", "--lora", "/a2"]),
    );
    expect(modelArgs(prepared({ embedding: true }, { params: { num_ctx: 512, num_batch: 1024 } })).join(" ")).toContain("--embedding --batch-size 512 --ubatch-size 512");
    expect(modelArgs(prepared({ mmproj: "/p", architecture: "qwen25vl" }))).toEqual(expect.arrayContaining(["--image-min-tokens", "1024"]));
  });

  it("a built-in chat template only when the GGUF has none", () => {
    const tpl = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>{{ end }}";
    expect(modelArgs(prepared({ hasChatTemplate: true }, { template: tpl }))).not.toContain("--chat-template");
    expect(modelArgs(prepared({ hasChatTemplate: false }, { template: tpl }))).toEqual(expect.arrayContaining(["--chat-template", "chatml"]));
    expect(builtinTemplateFor("<start_of_turn>user\n{{ .Prompt }}<end_of_turn>")).toBe("gemma");
    expect(builtinTemplateFor("<|start_header_id|>user<|end_header_id|>")).toBe("llama3");
    expect(builtinTemplateFor("{{ .Prompt }}")).toBeUndefined();
  });

  it("a router preset section: INI keys, adapters comma-joined, the Ollama name as alias", () => {
    const warnings: string[] = [];
    expect(presetSection("m:Q8_0", prepared()).split("\n").slice(0, 3)).toEqual(["[m@Q8_0]", "alias = m:Q8_0", "model = /cache/m.gguf"]);
    const s = presetSection("m:q4", prepared({ embedding: true }, { adapters: ["/a1", "/a2"], params: { stop: ["a", "b"] } }), (w) => warnings.push(w));
    expect(s).toBe("[m@q4]\nalias = m:q4\nmodel = /cache/m.gguf\nctx-size = 4096\nparallel = 1\nlora = /a1,/a2\nembedding = true\nreverse-prompt = a");
    expect(warnings).toEqual(['m:q4: a preset holds one --reverse-prompt; keeping "a"']);
  });

  it("preset section names llama.cpp keeps as they are: no colon, so tags that llama.cpp would fold together stay apart", () => {
    // llama.cpp turns both of these into x:Q4_K_M, and the second section would replace the first
    expect(llamaCanonicalName("x:8b-q4_K_M")).toBe(llamaCanonicalName("x:70b-q4_K_M"));
    expect(presetName("x:8b-q4_K_M")).toBe("x@8b-q4_K_M");
    expect(presetName("x:70b-q4_K_M")).toBe("x@70b-q4_K_M");
    expect(presetName("localhost:5000/ns/m:tag")).toBe("localhost@5000/ns/m@tag");
    for (const n of ["gemma3:4b", "x:8b-q4_K_M", "localhost:5000/ns/m:tag"]) expect(llamaCanonicalName(presetName(n))).toBe(presetName(n));
  });
});
