import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ApiError } from "../src/errors";
import type { LoadConfig, LoadWant } from "../src/load-config";
import { ModelScheduler, SERVER_BUSY, type Clock, type Lease, type ModelIo } from "../src/scheduler";

/**
 * The scheduler's decisions over every order of events fast-check's scheduler picks: requests
 * arriving, being cancelled and released; loads that are slow, fail, or succeed; unloads that
 * fail once; keep_alive timers running out; instances that die under a request; the files behind
 * a model changing (a create, copy or pull over it: retire) while it is loading, busy or idle,
 * after which a load reads the new files (as LoadConfigs.define puts them in the preset). The outside
 * world (llama-server's router) is a model of it that checks, at every step, what the
 * scheduler must never do.
 */

type WantKind = "flexible" | "exact" | "large";

interface Ask {
  model: number;
  want: WantKind;
  keepAlive?: number;
  /** Cancelled by its client at some point (before or after it got its model). */
  abort: boolean;
  /** The model's instance dies while this request holds it. */
  crash: boolean;
}

const config = (model: number, large: boolean): LoadConfig => (large ? { routerName: `m${model}~ctx1024`, numCtx: 1024 } : { routerName: `m${model}`, numCtx: 256 });
const want = (a: Ask): LoadWant => ({ config: config(a.model, a.want === "large"), flexible: a.want === "flexible" });

const askArb = (models: number): fc.Arbitrary<Ask> =>
  fc.record({
    model: fc.integer({ min: 0, max: models - 1 }),
    want: fc.constantFrom<WantKind>("flexible", "flexible", "exact", "large"),
    keepAlive: fc.option(fc.constantFrom(0, 1000, Infinity), { nil: undefined }),
    abort: fc.boolean(),
    crash: fc.constantFrom(false, false, false, false, true),
  });

const scenarioArb = fc
  .record({ maxLoaded: fc.integer({ min: 1, max: 4 }), models: fc.integer({ min: 1, max: 6 }), maxQueue: fc.constantFrom(2, 5, 512) })
  .chain((base) =>
    fc.record({
      maxLoaded: fc.constant(base.maxLoaded),
      maxQueue: fc.constant(base.maxQueue),
      models: fc.constant(base.models),
      asks: fc.array(askArb(base.models), { minLength: 1, maxLength: 24 }),
      /** Router names that never load. */
      failing: fc.subarray(Array.from({ length: base.models }, (_, i) => [config(i, false).routerName, config(i, true).routerName]).flat(), { maxLength: Math.min(3, 2 * base.models) }),
      /** Router names whose first unload is refused. */
      stubborn: fc.subarray(Array.from({ length: base.models }, (_, i) => config(i, false).routerName), { maxLength: Math.min(2, base.models) }),
      /** Models whose files change, at some moment each. */
      changes: fc.array(fc.integer({ min: 0, max: base.models - 1 }), { maxLength: 3 }),
    }),
  );

describe("ModelScheduler: every request answered or refused, never more than maxLoaded, never unloading a model in use", () => {
  it("holds over thousands of random interleavings", async () => {
    await fc.assert(
      fc.asyncProperty(fc.scheduler(), scenarioArb, async (s, sc) => {
        /** The router: what runs, and what the scheduler asked of it. */
        const running = new Map<string, "loading" | "loaded">();
        const leases = new Map<string, number>();
        const unloadRefused = new Set<string>();
        /** Instances that died since they were loaded. */
        const crashed = new Set<string>();
        /** Each model's files: bumped by a change. A load reads the files of the moment it starts. */
        const files = new Map<string, number>();
        const modelOf = (routerName: string) => routerName.split("~")[0]!;
        /** The files each running instance read. */
        const loadedFiles = new Map<string, number>();
        /** What the router saw the scheduler do wrong (an exception thrown in load() would only be a failed load to it). */
        const violations: string[] = [];
        const check = (ok: boolean, what: string) => {
          if (!ok) violations.push(what);
        };
        let steps = 0;
        const step = () => {
          // a scheduler that loads and unloads for ever would never let waitAll end
          if (++steps > 40 * sc.asks.length + 40) throw new Error(`more than ${steps - 1} loads and unloads for ${sc.asks.length} requests: the scheduler is going round in circles`);
        };
        const io: ModelIo = {
          async load(c) {
            step();
            check(!running.has(c.routerName), `${c.routerName} loaded twice`);
            running.set(c.routerName, "loading");
            loadedFiles.set(c.routerName, files.get(modelOf(c.routerName)) ?? 0);
            check(running.size <= sc.maxLoaded, `${[...running.keys()].join(", ")} running, ${sc.maxLoaded} at most`);
            await s.schedule(Promise.resolve(), `load ${c.routerName}`);
            if (sc.failing.includes(c.routerName)) {
              running.delete(c.routerName);
              throw new ApiError(500, `llama-server could not load ${c.routerName}: error loading model`);
            }
            running.set(c.routerName, "loaded");
            crashed.delete(c.routerName);
          },
          async unload(c) {
            step();
            check((leases.get(c.routerName) ?? 0) === 0, `${c.routerName} unloaded while requests hold it`);
            await s.schedule(Promise.resolve(), `unload ${c.routerName}`);
            if (sc.stubborn.includes(c.routerName) && !unloadRefused.has(c.routerName)) {
              unloadRefused.add(c.routerName);
              throw new Error("busy");
            }
            running.delete(c.routerName);
          },
          async running() {
            await s.schedule(Promise.resolve(), "running?");
            return new Set(running.keys());
          },
        };
        let time = 0;
        const clock: Clock = {
          now: () => time,
          after(_ms, fn) {
            let cancelled = false;
            void s.schedule(Promise.resolve(), "timer").then(() => {
              time += 1;
              if (!cancelled) fn();
            });
            return () => {
              cancelled = true;
            };
          },
        };
        const scheduler = new ModelScheduler(io, { maxLoaded: sc.maxLoaded, keepAliveMs: 1000, maxQueue: sc.maxQueue, clock });
        const outcomes: Array<string | undefined> = sc.asks.map(() => undefined);
        const requests = sc.asks.map((a, i) => ask(a, i).catch((e: unknown) => violations.push(String(e))));
        /** Changes whose retire has resolved (the old instance gone). */
        let retired = 0;
        sc.changes.forEach((model, k) => {
          void s.schedule(Promise.resolve(), `the files of m${model} change (${k})`).then(() => {
            const name = `m${model}`;
            files.set(name, (files.get(name) ?? 0) + 1);
            // no instance of the old files is ever unloaded under a request (io.unload checks) and, once gone, says so
            void scheduler.retire(name).then(() => {
              retired++;
              check(![...running.keys()].some((n) => modelOf(n) === name && loadedFiles.get(n)! < files.get(name)!), `retire(${name}) resolved while an instance of its old files runs`);
            });
          });
        });
        async function ask(a: Ask, i: number): Promise<void> {
          await s.schedule(Promise.resolve(), `request ${i} for m${a.model} (${a.want})`);
          const abort = new AbortController();
          /** How many requests left the queue when the client went (1: this one, at once). */
          let left: number | undefined;
          if (a.abort)
            void s.schedule(Promise.resolve(), `abort ${i}`).then(() => {
              const before = scheduler.queued;
              abort.abort();
              left = before - scheduler.queued;
            });
          const queueFull = scheduler.queued >= sc.maxQueue;
          /** The files of the model when the request came: it must be answered from those or newer. */
          const filesAsked = files.get(`m${a.model}`) ?? 0;
          let lease: Lease;
          try {
            lease = await scheduler.acquire(`m${a.model}`, want(a), a.keepAlive, abort.signal);
          } catch (e) {
            const status = (e as ApiError).status;
            outcomes[i] = `refused ${status}`;
            // each refusal has its cause
            if (status === 499) {
              expect(abort.signal.aborted).toBe(true);
              // cancelled while it waited (the abort comes after the request, at a later step): it left the
              // queue at once (and the decisions taken again then may have let others go too)
              expect(left).toBeGreaterThanOrEqual(1);
            }
            else if (status === 503) expect({ queueFull, message: (e as Error).message }).toEqual({ queueFull: true, message: SERVER_BUSY });
            else expect(sc.failing).toContain(want(a).config.routerName);
            return;
          }
          outcomes[i] = "answered";
          const target = lease.target;
          // the lease is on a loaded configuration that serves the request
          expect(running.get(target) === "loaded" || crashed.has(target), `request ${i} given ${target}, which is not loaded`).toBe(true);
          const w = want(a);
          expect(target === w.config.routerName || (w.flexible && target.startsWith(`m${a.model}`))).toBe(true);
          // a request that came after a change is never answered by an instance of the files before it
          expect(loadedFiles.get(target), `request ${i} given ${target} of older files`).toBeGreaterThanOrEqual(filesAsked);
          leases.set(target, (leases.get(target) ?? 0) + 1);
          await s.schedule(Promise.resolve(), `answer ${i}`);
          if (a.crash && running.has(target)) {
            running.delete(target);
            crashed.add(target);
            lease.lost();
          }
          leases.set(target, leases.get(target)! - 1);
          lease.release();
          lease.release(); // twice is once
        }
        // every task, including those scheduled after a chain of promise steps (setImmediate runs once they have all run)
        do {
          await s.waitAll();
          await new Promise((r) => setImmediate(r));
        } while (s.count() > 0);
        expect(violations).toEqual([]);
        // nothing is left waiting for ever
        expect(outcomes.map((o, i) => o ?? `request ${i} never answered (${scheduler.queued} queued)`).filter((o) => !o.startsWith("answered") && !o.startsWith("refused"))).toEqual([]);
        await Promise.all(requests);
        expect(scheduler.queued).toBe(0);
        // every change's retire resolved: the old instance went once its requests were done
        expect(retired).toBe(sc.changes.length);
        // requests that nothing refused are answered: only a cancelled client, a full queue or a failing model is a refusal
        sc.asks.forEach((a, i) => {
          if (!a.abort && sc.maxQueue === 512 && !sc.failing.includes(want(a).config.routerName)) expect(outcomes[i], `request ${i}`).toBe("answered");
        });
        // once every timer has run, every model went with its keep_alive (none held for ever was asked for)
        if (sc.asks.every((a) => a.keepAlive !== Infinity)) expect([...running.keys()]).toEqual([]);
        scheduler.close();
      }),
      { numRuns: 3000 },
    );
  }, 600_000);
});
