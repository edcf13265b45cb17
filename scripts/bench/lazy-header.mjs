// The lazy-parse row of `npm run bench`, in a process of its own: runs of a few milliseconds,
// measured in the bench's own process, pick up the collection of the gigabytes the other
// parsers leave behind. Alternates a lazy readGguf with a plain read of the header's bytes
// and prints their medians as JSON.
import { readGguf } from "@compat/gguf";
import { headerLength, readHeaderBytes } from "./header-bytes.mjs";

const [path, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 31);
const headerBytes = await headerLength(path);
const readHeader = () => readHeaderBytes(path, headerBytes);
const lazy = async () => (await readGguf(path)).close();

const fns = [lazy, readHeader];
for (const f of fns) await f(); // warm-up
const times = fns.map(() => []);
for (let r = 0; r < runs; r++) {
  for (const [i, f] of fns.entries()) {
    const t0 = performance.now();
    await f();
    times[i].push(performance.now() - t0);
  }
}
const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
console.log(JSON.stringify({ lazy: median(times[0]), bytes: median(times[1]), headerBytes }));
