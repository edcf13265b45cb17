import { upstreamMessage, ApiError } from "./errors";
import type { RouterStatus, Upstream } from "./upstream";

export interface SchedulerOptions {
  /** Models loaded at once; 0: no limit. */
  maxLoaded: number;
  /** How long an idle model stays loaded when a request names no keep_alive (ms; Infinity: forever). */
  keepAliveMs: number;
  /** How often a load's progress is polled (ms). */
  pollMs?: number;
  onStatus?(line: string): void;
}

/** A model held loaded for one request; release it when the answer is done. */
export interface Lease {
  /** How long the request waited for the model to load (0 when it was loaded). */
  loadMs: number;
  release(): void;
}

interface Slot {
  name: string;
  /** Requests holding a lease: a model with any is never unloaded. */
  inFlight: number;
  /** Loaded or loading, as far as the last look at the router and our own loads tell. */
  running: boolean;
  /** Seen loaded (ready for requests). */
  loaded: boolean;
  lastUsed: number;
  keepAliveMs: number;
  expiresAt?: number;
  timer?: NodeJS.Timeout;
}

const RUNNING: ReadonlySet<RouterStatus> = new Set(["loaded", "loading", "sleeping"]);

/**
 * Which models are loaded in the router, decided in one place. llama-server's own limit
 * (--models-max) lets two concurrent first requests for unloaded models evict the same idle
 * model, after which one of them waits for a slot nobody frees (server-models.cpp: pick_victim
 * skips neither a model already being stopped nor one another request picked). The router
 * therefore runs without a limit and this scheduler keeps it: loads are decided one at a time,
 * a model with a request in flight is never evicted, and a request that finds every slot busy
 * waits for one to go idle. Idle models are unloaded after their keep_alive, as Ollama does.
 */
export class ModelScheduler {
  private readonly slots = new Map<string, Slot>();
  /** Admissions run one after another: each sees the loads and unloads of the one before. */
  private admitting: Promise<unknown> = Promise.resolve();
  private idleWaiters: Array<() => void> = [];
  private closed = false;

  constructor(
    private readonly upstream: Upstream,
    private readonly opts: SchedulerOptions,
  ) {}

  /**
   * Holds `name` loaded for one request: loads it (unloading the least recently used idle model
   * when the limit is reached) and waits until llama-server reports it loaded.
   */
  async acquire(name: string, keepAliveMs?: number, signal?: AbortSignal): Promise<Lease> {
    const slot = this.slot(name);
    slot.inFlight++;
    if (keepAliveMs !== undefined) slot.keepAliveMs = keepAliveMs;
    clearTimeout(slot.timer);
    slot.timer = undefined;
    slot.expiresAt = undefined;
    const start = performance.now();
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.release(slot);
    };
    if (slot.loaded) return { loadMs: 0, release };
    try {
      // behind any load or unload under way (this very model may be on its way out)
      await this.serialized(() => this.admit(slot));
      await this.waitLoaded(slot, signal);
    } catch (e) {
      release();
      throw e;
    }
    return { loadMs: performance.now() - start, release };
  }

  /** Unloads `name` now (keep_alive 0 with nothing to answer); waits until it is gone. */
  unload(name: string): Promise<void> {
    const slot = this.slot(name);
    return this.serialized(async () => {
      if (slot.inFlight === 0) await this.stop(slot);
    });
  }

  /** When an idle loaded model will be unloaded (undefined: in use, or kept forever). */
  expiresAt(name: string): number | undefined {
    const s = this.slots.get(name);
    if (!s) return undefined;
    if (s.inFlight > 0 || s.keepAliveMs === Infinity) return Date.now() + Math.min(s.keepAliveMs, 1e13);
    return s.expiresAt;
  }

  close(): void {
    this.closed = true;
    for (const s of this.slots.values()) clearTimeout(s.timer);
    for (const w of this.idleWaiters.splice(0)) w();
  }

  private slot(name: string): Slot {
    let s = this.slots.get(name);
    if (!s) {
      s = { name, inFlight: 0, running: false, loaded: false, lastUsed: 0, keepAliveMs: this.opts.keepAliveMs };
      this.slots.set(name, s);
    }
    return s;
  }

  private release(slot: Slot): void {
    slot.inFlight--;
    slot.lastUsed = performance.now();
    if (slot.inFlight > 0 || this.closed) return;
    for (const w of this.idleWaiters.splice(0)) w();
    if (slot.keepAliveMs === Infinity) return;
    slot.expiresAt = Date.now() + slot.keepAliveMs;
    slot.timer = setTimeout(() => {
      slot.timer = undefined;
      void this.serialized(async () => {
        if (slot.inFlight === 0 && slot.running) {
          this.opts.onStatus?.(`unloading ${slot.name} (idle for its keep_alive)`);
          await this.stop(slot);
        }
      }).catch((e: unknown) => this.opts.onStatus?.(`warning: unloading ${slot.name}: ${(e as Error).message}`));
    }, Math.min(slot.keepAliveMs, 2 ** 31 - 1));
    slot.timer.unref();
  }

  private serialized<T>(job: () => Promise<T>): Promise<T> {
    const run = this.admitting.then(job, job);
    this.admitting = run.catch(() => undefined);
    return run;
  }

  /** Under the admission lock: make room for `slot` and start its load. */
  private async admit(slot: Slot): Promise<void> {
    for (;;) {
      await this.refresh();
      if (slot.running) return;
      const others = [...this.slots.values()].filter((s) => s.running && s !== slot);
      if (this.opts.maxLoaded <= 0 || others.length < this.opts.maxLoaded) break;
      const idle = others.filter((s) => s.inFlight === 0).sort((a, b) => a.lastUsed - b.lastUsed);
      if (idle.length > 0) {
        this.opts.onStatus?.(`unloading ${idle[0]!.name} to make room for ${slot.name} (${this.opts.maxLoaded} loaded at most)`);
        await this.stop(idle[0]!);
        continue;
      }
      // every loaded model is answering a request: the first to finish gives up its slot
      await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      if (this.closed) throw new ApiError(503, "the server is shutting down");
    }
    const { status, text } = await this.upstream.call("POST", "/models/load", { model: slot.name });
    if (status !== 200 && !/already running/.test(text)) throw new ApiError(500, `llama-server could not start ${slot.name}: ${upstreamMessage(text)}`);
    slot.running = true;
  }

  /** The router's own view: a model that exited (or crashed) is no longer running. */
  private async refresh(): Promise<void> {
    const statuses = await this.upstream.statuses();
    for (const s of this.slots.values()) {
      const now = statuses.get(s.name) ?? "unloaded";
      s.running = RUNNING.has(now);
      s.loaded = now === "loaded" || now === "sleeping";
    }
  }

  private async stop(slot: Slot): Promise<void> {
    // from now on a request for it waits for the admission lock, which this stop holds
    slot.loaded = false;
    clearTimeout(slot.timer);
    slot.timer = undefined;
    slot.expiresAt = undefined;
    const { status, text } = await this.upstream.call("POST", "/models/unload", { model: slot.name });
    if (status !== 200 && !/not running/.test(text)) throw new ApiError(500, `llama-server could not unload ${slot.name}: ${upstreamMessage(text)}`);
    for (;;) {
      const now = (await this.upstream.statuses()).get(slot.name) ?? "unloaded";
      if (!RUNNING.has(now)) break;
      await sleep(this.opts.pollMs ?? 25);
    }
    slot.running = false;
    slot.loaded = false;
  }

  private async waitLoaded(slot: Slot, signal?: AbortSignal): Promise<void> {
    for (;;) {
      const now = (await this.upstream.statuses()).get(slot.name) ?? "unloaded";
      if (now === "loaded" || now === "sleeping") {
        slot.loaded = true;
        return;
      }
      if (now === "failed" || now === "unloaded") {
        slot.running = false;
        slot.loaded = false;
        throw new ApiError(500, `llama-server failed to load ${slot.name} (its log says why)`);
      }
      if (signal?.aborted) throw new ApiError(499, "request canceled");
      await sleep(this.opts.pollMs ?? 25);
    }
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
