import type { Handler } from "../handler";

/**
 * llama.cpp has no "olmo3" architecture; its olmo2 loader covers the same tensors and
 * OLMo 3's sliding-window layout. Every olmo3 file is renamed (there is no other marker).
 */
export const olmo3: Handler = {
  name: "olmo3",
  arch: "olmo3",
  detect: () => ["architecture olmo3"],
  apply(t) {
    t.setArch("olmo2");
    t.copyKvPrefix("olmo3.", "olmo2.");
  },
};
