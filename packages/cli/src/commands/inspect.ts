import { readGguf } from "@compat/gguf";
import { formatInspect, inspectJson } from "../format";
import type { CliIo } from "../io";
import { jsonText, terminalSafeLines } from "../terminal";
import { resolveInput } from "./resolve";

export async function inspectCommand(file: string, opts: { json?: boolean; full?: boolean }, io: CliIo): Promise<void> {
  const model = await readGguf((await resolveInput(file, io)).path);
  try {
    // keys, strings and tensor names are the file's: nothing in them reaches the terminal raw
    io.out(opts.json ? jsonText(inspectJson(model, opts), 2) + "\n" : terminalSafeLines(formatInspect(file, model, opts)));
  } finally {
    await model.close();
  }
}
