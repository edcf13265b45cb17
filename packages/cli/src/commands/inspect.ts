import { readGguf } from "@compat/gguf";
import { formatInspect, inspectJson } from "../format";
import type { CliIo } from "../io";
import { resolveInput } from "./resolve";

export async function inspectCommand(file: string, opts: { json?: boolean; full?: boolean }, io: CliIo): Promise<void> {
  const model = await readGguf(await resolveInput(file, io));
  try {
    io.out(opts.json ? JSON.stringify(inspectJson(model, opts), null, 2) + "\n" : formatInspect(file, model, opts));
  } finally {
    await model.close();
  }
}
