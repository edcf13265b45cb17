/** Layer media types of an Ollama manifest (server/images.go, manifest/layer.go). */
export const MediaType = {
  manifest: "application/vnd.docker.distribution.manifest.v2+json",
  config: "application/vnd.docker.container.image.v1+json",
  model: "application/vnd.ollama.image.model",
  projector: "application/vnd.ollama.image.projector",
  adapter: "application/vnd.ollama.image.adapter",
  template: "application/vnd.ollama.image.template",
  /** The older name of the template layer. */
  prompt: "application/vnd.ollama.image.prompt",
  system: "application/vnd.ollama.image.system",
  params: "application/vnd.ollama.image.params",
  messages: "application/vnd.ollama.image.messages",
  license: "application/vnd.ollama.image.license",
  draft: "application/vnd.ollama.image.draft",
  /** Safetensors-era models store one layer per tensor; llama.cpp cannot serve those. */
  tensor: "application/vnd.ollama.image.tensor",
} as const;
