import { describe, expect, it } from "vitest";
import type { LoadConfig, LoadWant } from "../src/load-config";
import { ModelScheduler, type ModelIo } from "../src/scheduler";

/**
 * ModelScheduler.retire, what a create, copy or pull over a served name calls: the instance of
 * the old files answers the requests it holds, takes no new one, and goes once they are done;
 * the next request loads again (the new files). Driven event by event against a router model
 * that records every load and unload; nothing depends on timing.
 */
const WANT: LoadWant = { config: { routerName: "m", numCtx: 256 }, flexible: true };

function router(): { io: ModelIo; log: string[] } {
  const log: string[] = [];
  const running = new Set<string>();
  const io: ModelIo = {
    load: async (c: LoadConfig) => {
      log.push(`load ${c.routerName}`);
      running.add(c.routerName);
    },
    unload: async (c: LoadConfig) => {
      log.push(`unload ${c.routerName}`);
      running.delete(c.routerName);
    },
    running: async () => new Set(running),
  };
  return { io, log };
}

const settle = () => new Promise((r) => setImmediate(r));

describe("ModelScheduler.retire", () => {
  it("a busy instance takes no new request, goes when its last one is done, and the waiting request loads afresh", async () => {
    const { io, log } = router();
    const s = new ModelScheduler(io, { maxLoaded: 4, keepAliveMs: Infinity });
    const held = await s.acquire("m", WANT);
    expect(log).toEqual(["load m"]);
    let gone = false;
    const retired = s.retire("m").then(() => (gone = true));
    expect(s.busy("m")).toBe(true);
    let granted = false;
    const next = s.acquire("m", WANT).then((l) => ((granted = true), l));
    await settle();
    expect({ gone, granted, log }).toEqual({ gone: false, granted: false, log: ["load m"] });
    held.release();
    await retired;
    const lease = await next;
    expect(gone && granted).toBe(true);
    expect(log).toEqual(["load m", "unload m", "load m"]);
    lease.release();
    s.close();
  });

  it("an idle instance goes at once; nothing loaded: resolves at once", async () => {
    const { io, log } = router();
    const s = new ModelScheduler(io, { maxLoaded: 4, keepAliveMs: Infinity });
    await s.retire("m");
    (await s.acquire("m", WANT)).release();
    await s.retire("m");
    expect(log).toEqual(["load m", "unload m"]);
    s.close();
  });
});
