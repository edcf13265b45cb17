// How every bench row is timed: candidates alternated run by run (so drift from other load
// hits all of them), after one warm-up each, summarised by medians.

/** The median of `xs` (the mean of the two middle values for an even count). */
export function median(xs) {
  const s = xs.slice().sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/**
 * Runs each of `fns` once to warm up, then `runs` times in turn, calling `before` (untimed)
 * before each run; returns each candidate's median time in ms. A candidate that resolves to
 * `{ ownMs }` has timed itself (a server until it is ready, not its stop after): that is its
 * time. BENCH_VERBOSE=1 prints every run.
 */
export async function race(fns, runs, before) {
  for (const f of fns) await f();
  const times = fns.map(() => []);
  for (let r = 0; r < runs; r++) {
    for (const [i, f] of fns.entries()) {
      before?.();
      const t0 = performance.now();
      const own = await f();
      const t = typeof own?.ownMs === "number" ? own.ownMs : performance.now() - t0;
      times[i].push(t);
      if (process.env.BENCH_VERBOSE) console.error(`    run ${r} candidate ${i}: ${t.toFixed(0)} ms`);
    }
  }
  return times.map(median);
}
