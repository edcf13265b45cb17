import { anyOf, hasTensorPrefix } from "../detect";
import type { Handler } from "../handler";

/** Llama 4 with its vision tower inline: the text view only hides it. */
export const llama4: Handler = {
  name: "llama4",
  arch: "llama4",
  detect(m) {
    return anyOf(hasTensorPrefix(m, "v.") && "embedded vision tensors v.*", hasTensorPrefix(m, "mm.") && "embedded projector tensors mm.*");
  },
  apply(t) {
    t.hide("v.");
    t.hide("mm.");
  },
};
