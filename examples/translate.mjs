// Translate an Ollama GGUF in your own tool with @compat/handlers: inspect the report,
// then write the llama.cpp-loadable file (atomically).
// Usage: node translate.mjs OLLAMA_BLOB OUT.gguf
import { translate } from "@compat/handlers";

const [input, output] = process.argv.slice(2);
const view = await translate(input);
if (view === null) {
  console.log("nothing to do: llama.cpp loads this file as it is");
} else {
  const r = view.report;
  console.log(`handlers: ${r.handlers.map((h) => h.name).join(", ")}; ${r.kv.added.length} keys added, ${r.tensors.renamed.length} tensors renamed`);
  await view.writeTo(output);
  await view.close();
  console.log(`wrote ${output}`);
}
