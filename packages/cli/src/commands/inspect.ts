import { readGguf } from "@compat/gguf";
import { formatInspect, inspectJson } from "../format";
import type { CliIo } from "../io";
import { resolveInput } from "./resolve";

export async function inspectCommand(file: string, opts: { json?: boolean }, io: CliIo): Promise<void> {
  const model = await readGguf(await resolveInput(file, io));
  try {
    io.out(opts.json ? JSON.stringify(inspectJson(model), null, 2) + "\n" : formatInspect(file, model));
  } finally {
    await model.close();
  }
}
