// The same edit gguf_new_metadata.py makes (a new general.name), with @compat/gguf:
// header rewritten, tensor data copied in the kernel when the addon is there.
import { readGguf, writeGguf } from "@compat/gguf";
import { kernelRangeCopier } from "@compat/tensor-ops";

const [input, output, name] = process.argv.slice(2);
const m = await readGguf(input);
m.setString("general.name", name ?? "renamed");
const copyRange = kernelRangeCopier();
await writeGguf(m, output, copyRange ? { copyRange } : {});
await m.close();
