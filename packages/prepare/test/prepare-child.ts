// Run by cache.test.ts in separate processes: prepares one model and prints whether it was a cache hit
// (its status lines on stderr).
import { prepareModel, TranslationCache } from "@compat/prepare";
import { ModelStore } from "@compat/store";

const [root, ref, cacheDir] = process.argv.slice(2) as [string, string, string];
const m = await prepareModel(await new ModelStore(root).resolve(ref), {
  cache: new TranslationCache({ dir: cacheDir }),
  onStatus: (line) => process.stderr.write(`${line}\n`),
});
process.stdout.write(JSON.stringify({ hit: m.cacheHit, path: m.modelPath }) + "\n");
