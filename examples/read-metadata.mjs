// Read a GGUF's metadata with @compat/gguf alone: only the header is read.
// Usage: node read-metadata.mjs FILE.gguf
import { readGguf, summarize } from "@compat/gguf";

const model = await readGguf(process.argv[2]);
const s = summarize(model);
console.log(`${s.architecture}: ${s.tensorCount} tensors, ${s.parameterCount.toLocaleString("en")} parameters, ${s.kvCount} keys`);
console.log(`context length: ${model.getNumber(`${s.architecture}.context_length`, 0) || "not set"}`);
await model.close();
