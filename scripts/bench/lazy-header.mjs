// The lazy-parse row of `npm run bench`, in a process of its own: runs of a few milliseconds,
// measured in the bench's own process, pick up the collection of the gigabytes the other
// parsers leave behind. Alternates a lazy readGguf with a plain read of the header's bytes
// and prints their medians as JSON.
import { readGguf } from "@compat/gguf";
import { headerLength, readHeaderBytes } from "./header-bytes.mjs";
import { race } from "./race.mjs";

const [path, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 31);
const headerBytes = await headerLength(path);
const readHeader = () => readHeaderBytes(path, headerBytes);
const lazy = async () => (await readGguf(path)).close();

const [tLazy, tBytes] = await race([lazy, readHeader], runs);
console.log(JSON.stringify({ lazy: tLazy, bytes: tBytes, headerBytes }));
