// Preloaded into benchmarked node processes: on exit, report peak RSS and the bytes the
// process moved through read()/write() (/proc/self/io rchar/wchar; in-kernel copies are not counted).
const { readFileSync, writeSync } = require("node:fs");
process.on("exit", () => {
  let io = "";
  try {
    io = readFileSync("/proc/self/io", "utf8");
  } catch {}
  const get = (k) => Number((new RegExp(`^${k}: (\\d+)`, "m").exec(io) ?? [])[1] ?? -1);
  writeSync(process.env.BENCH_STATS_FD ? Number(process.env.BENCH_STATS_FD) : 2, `\nBENCHSTATS ${JSON.stringify({ maxRssKiB: process.resourceUsage().maxRSS, rchar: get("rchar"), wchar: get("wchar") })}\n`);
});
