import { GgufValueType } from "@compat/gguf";
import type { Handler } from "@compat/handlers";

/**
 * Old LLaVA / BakLLaVA models in Ollama's store keep their projector in a separate
 * clip GGUF written before llama.cpp named projector types; without one, current
 * clip.cpp stops with "unknown projector type". Those projectors are the two-layer MLP.
 */
export const llavaProjectorDefault: Handler = {
  name: "llava-projector-type",
  arch: "clip",
  detect(m) {
    const vision = m.get("clip.has_vision_encoder");
    if (vision?.type !== GgufValueType.BOOL || vision.value !== true) return null;
    if (m.has("clip.projector_type") || m.has("clip.vision.projector_type")) return null;
    return ["clip projector without clip.projector_type"];
  },
  apply(t) {
    t.setString("clip.projector_type", "mlp");
  },
};
