// The same edit gguf_new_metadata.py makes (a new general.name), with @compat/gguf:
// header rewritten, tensor data copied in the kernel when the addon is there (shared
// extents where the filesystem can).
import { readGguf, writeGguf } from "@compat/gguf";
import { kernelRangeCopier } from "@compat/files";
import { nativeFileCopy } from "@compat/tensor-ops";

const [input, output, name] = process.argv.slice(2);
const m = await readGguf(input);
m.setString("general.name", name ?? "renamed");
const copyRange = kernelRangeCopier(nativeFileCopy());
// shareBlocks: the data section keeps its place within a block, so XFS/Btrfs share its extents
await writeGguf(m, output, { shareBlocks: true, ...(copyRange ? { copyRange } : {}) });
await m.close();
