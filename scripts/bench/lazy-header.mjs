// The lazy-parse row of `npm run bench`, in a process of its own: runs of a few milliseconds,
// measured in the bench's own process, pick up the collection of the gigabytes the other
// parsers leave behind. Alternates a lazy readGguf with a plain read of the header's bytes
// (and the same parse of bytes already in memory, its floor) and prints their medians as JSON.
import { statSync } from "node:fs";
import { parseGguf, readGguf } from "@compat/gguf";
import { headerLength, readHeaderBytes } from "./header-bytes.mjs";
import { race } from "./race.mjs";

const [path, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 31);
const headerBytes = await headerLength(path);
const readHeader = () => readHeaderBytes(path, headerBytes);
const lazy = async () => (await readGguf(path)).close();
// The same parse with no reads: the header's bytes are already in memory.
const inMemoryBytes = await readHeader();
const fileSize = statSync(path).size;
const inMemory = () => parseGguf(inMemoryBytes, path, { fileSize });

const [tLazy, tBytes, tInMemory] = await race([lazy, readHeader, inMemory], runs);
console.log(JSON.stringify({ lazy: tLazy, bytes: tBytes, inMemory: tInMemory, headerBytes }));
