import type { Handler } from "../handler";
import { hasTensorPrefix } from "../reads";
import { anyOf } from "../markers";

const MAX_BLOCKS_SCANNED = 1024;

/**
 * Nemotron-H MoE: latent-FFN variants used ffn_latent_in/out and carried no
 * moe_latent_size; embedded MTP heads (mtp.*) are not a layout llama.cpp reads.
 */
export const nemotronHMoe: Handler = {
  name: "nemotron_h_moe",
  arch: "nemotron_h_moe",
  detect(m) {
    return anyOf(
      (hasTensorPrefix(m, "blk.0.ffn_latent_in") || hasTensorPrefix(m, "blk.1.ffn_latent_in")) && "tensor blk.N.ffn_latent_in",
      hasTensorPrefix(m, "mtp.") && "embedded MTP tensors mtp.*",
    );
  },
  apply(t) {
    if (!t.draft.has("nemotron_h_moe.moe_latent_size")) {
      for (let b = 0; b < MAX_BLOCKS_SCANNED; b++) {
        const latentIn = t.draft.findTensor(`blk.${b}.ffn_latent_in.weight`);
        if (latentIn !== undefined) {
          t.setU32("nemotron_h_moe.moe_latent_size", latentIn.shape[1] ?? 1);
          break;
        }
      }
    }
    t.renameTensorsContaining(".ffn_latent_in", ".ffn_latent_down");
    t.renameTensorsContaining(".ffn_latent_out", ".ffn_latent_up");
    t.hide("mtp.");
  },
};
