// Preloaded into benchmarked node processes: on exit, report the peak RSS on stderr.
const { writeSync } = require("node:fs");
process.on("exit", () => {
  writeSync(2, `\nBENCHSTATS ${JSON.stringify({ maxRssKiB: process.resourceUsage().maxRSS })}\n`);
});
