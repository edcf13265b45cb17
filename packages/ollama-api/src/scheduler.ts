import { ApiError, upstreamMessage } from "./errors";
import type { LoadConfig, LoadWant } from "./load-config";
import type { RouterStatus, Upstream } from "./upstream";

export interface SchedulerOptions {
  /** Models loaded at once; 0: no limit. */
  maxLoaded: number;
  /** How long an idle model stays loaded when the request that loaded it names no keep_alive (ms; Infinity: forever). */
  keepAliveMs: number;
  /** How often a load's progress is polled (ms). */
  pollMs?: number;
  /** Makes the router know a configuration before it is loaded; `inUse`: router names that must stay known. */
  define?(config: LoadConfig, inUse: ReadonlySet<string>): Promise<void>;
  onStatus?(line: string): void;
}

/** A model held loaded for one request; release it when the answer is done. */
export interface Lease {
  /** The router name to send the request to: the configuration that serves it. */
  target: string;
  /** How long the request waited for the model to load (0 when it was loaded). */
  loadMs: number;
  release(): void;
  /**
   * The router said the configuration is not running (its instance died since the scheduler
   * last looked): the next lease loads it again. Call before release().
   */
  lost(): void;
}

interface Slot {
  /** The Ollama name. */
  name: string;
  /** The configuration loaded, loading, or claimed to be loaded next; at most one per model. */
  config?: LoadConfig;
  /** Requests holding a lease on `config`: while any does, it is neither unloaded nor changed. */
  inFlight: number;
  /** Loaded or loading, as far as the last look at the router and our own loads tell. */
  running: boolean;
  /** Seen loaded (ready for requests). */
  loaded: boolean;
  /** Requests that need another configuration, first come first served; none joins `config` past them. */
  queue: object[];
  /** Called when inFlight drops to 0, the configuration goes, or the queue moves. */
  wakers: Array<() => void>;
  lastUsed: number;
  keepAliveMs: number;
  expiresAt?: number;
  timer?: NodeJS.Timeout;
}

const RUNNING: ReadonlySet<RouterStatus> = new Set(["loaded", "loading", "sleeping"]);

/** Whether the loaded configuration `c` can answer a request that wants `w`. */
function serves(c: LoadConfig, w: LoadWant): boolean {
  return c.routerName === w.config.routerName || (w.flexible && c.numCtx >= w.config.numCtx);
}

/**
 * Which models are loaded in the router, and in which configuration, decided in one place.
 * llama-server's own limit (--models-max) lets two concurrent first requests for unloaded models
 * evict the same idle model, after which one of them waits for a slot nobody frees
 * (server-models.cpp: pick_victim skips neither a model already being stopped nor one another
 * request picked). The router therefore runs without a limit and this scheduler keeps it: loads
 * are decided one at a time, a model with a request in flight is never evicted, and a request
 * that finds every slot busy waits for one to go idle. A request that needs another
 * configuration of a loaded model (a larger num_ctx) waits until the one loaded is idle, then
 * it is unloaded and the new one loaded, as Ollama reloads a runner whose options differ;
 * requests for the same model queue behind it in order, so a stream of requests for the old
 * configuration cannot keep it waiting. Idle models are unloaded after their keep_alive.
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
   * Holds model `name` loaded in a configuration that serves `want` for one request: loads it
   * (unloading the least recently used idle model when the limit is reached, or this model's
   * other configuration once it is idle) and waits until llama-server reports it loaded.
   */
  async acquire(name: string, want: LoadWant, keepAliveMs?: number, signal?: AbortSignal): Promise<Lease> {
    const start = performance.now();
    const slot = this.slot(name);
    if (slot.queue.length === 0 && slot.config && serves(slot.config, want)) return this.join(slot, keepAliveMs, start, signal);
    const ticket = {};
    slot.queue.push(ticket);
    try {
      for (;;) {
        if (this.closed) throw new ApiError(503, "the server is shutting down");
        if (signal?.aborted) throw new ApiError(499, "request canceled");
        if (slot.queue[0] === ticket) {
          if (!slot.config) {
            // a fresh load: its keep_alive is this request's, else the server's
            slot.config = want.config;
            slot.keepAliveMs = keepAliveMs ?? this.opts.keepAliveMs;
          }
          if (serves(slot.config, want)) break;
          if (slot.inFlight === 0) {
            const from = slot.config.routerName;
            await this.serialized(async () => {
              if (slot.config && slot.inFlight === 0) {
                this.opts.onStatus?.(`unloading ${from} to load ${want.config.routerName}`);
                await this.stop(slot);
              }
            });
            continue;
          }
        }
        await this.changed(slot, signal);
      }
    } finally {
      slot.queue.splice(slot.queue.indexOf(ticket), 1);
      this.notify(slot); // the next in line looks again
    }
    return this.join(slot, keepAliveMs, start, signal);
  }

  /** Unloads `name` now (keep_alive 0 with nothing to answer); waits until it is gone. */
  unload(name: string): Promise<void> {
    const slot = this.slot(name);
    return this.serialized(async () => {
      if (slot.inFlight === 0) await this.stop(slot);
    });
  }

  /** The configuration of `name` loaded, loading or about to be (undefined: none). */
  configOf(name: string): LoadConfig | undefined {
    return this.slots.get(name)?.config;
  }

  /** When an idle loaded model will be unloaded (undefined: never asked for). */
  expiresAt(name: string): number | undefined {
    const s = this.slots.get(name);
    if (!s) return undefined;
    if (s.inFlight > 0 || s.keepAliveMs === Infinity) return Date.now() + Math.min(s.keepAliveMs, 1e13);
    return s.expiresAt;
  }

  /** An answer failed: look at the router again before the next request trusts the model to be loaded. */
  suspect(name: string): void {
    const s = this.slots.get(name);
    if (s) s.loaded = false;
  }

  close(): void {
    this.closed = true;
    for (const s of this.slots.values()) {
      clearTimeout(s.timer);
      this.notify(s);
    }
    for (const w of this.idleWaiters.splice(0)) w();
  }

  private slot(name: string): Slot {
    let s = this.slots.get(name);
    if (!s) {
      s = { name, inFlight: 0, running: false, loaded: false, queue: [], wakers: [], lastUsed: 0, keepAliveMs: this.opts.keepAliveMs };
      this.slots.set(name, s);
    }
    return s;
  }

  /** A lease on the slot's configuration, loaded first if it is not. */
  private async join(slot: Slot, keepAliveMs: number | undefined, start: number, signal?: AbortSignal): Promise<Lease> {
    slot.inFlight++;
    if (keepAliveMs !== undefined) slot.keepAliveMs = keepAliveMs;
    clearTimeout(slot.timer);
    slot.timer = undefined;
    slot.expiresAt = undefined;
    const target = slot.config!.routerName;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.release(slot);
    };
    const lost = () => {
      slot.loaded = false;
      slot.running = false;
    };
    if (slot.loaded) return { target, loadMs: 0, release, lost };
    for (let attempt = 0; ; attempt++) {
      try {
        // behind any load or unload under way (this very model may be on its way out)
        await this.serialized(() => this.admit(slot));
        await this.waitLoaded(slot, signal);
        break;
      } catch (e) {
        // An instance that had just died can still show as running to admit(), which then starts
        // no load and waitLoaded sees it go: once more, and a load is started. A model that
        // really fails to load fails again, and that is the answer.
        if (attempt === 0 && e instanceof LoadFailed) continue;
        release();
        throw e;
      }
    }
    return { target, loadMs: performance.now() - start, release, lost };
  }

  private release(slot: Slot): void {
    slot.inFlight--;
    slot.lastUsed = performance.now();
    if (slot.inFlight > 0 || this.closed) return;
    for (const w of this.idleWaiters.splice(0)) w();
    this.notify(slot);
    // a request waiting for another configuration unloads this one now
    if (slot.queue.length > 0 || slot.keepAliveMs === Infinity) return;
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

  private notify(slot: Slot): void {
    for (const w of slot.wakers.splice(0)) w();
  }

  /** Resolves at the slot's next change (or when the request is cancelled). */
  private changed(slot: Slot, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        signal?.removeEventListener("abort", done);
        resolve();
      };
      slot.wakers.push(done);
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  private serialized<T>(job: () => Promise<T>): Promise<T> {
    const run = this.admitting.then(job, job);
    this.admitting = run.catch(() => undefined);
    return run;
  }

  /** Under the admission lock: make room for the slot's configuration and start its load. */
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
    const config = slot.config!;
    await this.opts.define?.(config, new Set([...this.slots.values()].flatMap((s) => (s.config ? [s.config.routerName] : []))));
    const { status, text } = await this.upstream.call("POST", "/models/load", { model: config.routerName });
    if (status !== 200 && !/already running/.test(text)) throw new ApiError(500, `llama-server could not start ${config.routerName}: ${upstreamMessage(text)}`);
    slot.running = true;
  }

  /** The router's own view: a model that exited (or crashed) is no longer running. */
  private async refresh(): Promise<void> {
    const statuses = await this.upstream.statuses();
    for (const s of this.slots.values()) {
      const now = s.config ? (statuses.get(s.config.routerName) ?? "unloaded") : "unloaded";
      s.running = RUNNING.has(now);
      s.loaded = now === "loaded" || now === "sleeping";
    }
  }

  /** Unloads the slot's configuration and waits until the router says it is gone. */
  private async stop(slot: Slot): Promise<void> {
    const config = slot.config;
    if (!config) return;
    // from now on a request for it waits for the admission lock, which this stop holds
    slot.loaded = false;
    clearTimeout(slot.timer);
    slot.timer = undefined;
    slot.expiresAt = undefined;
    const { status, text } = await this.upstream.call("POST", "/models/unload", { model: config.routerName });
    if (status !== 200 && !/not running/.test(text)) throw new ApiError(500, `llama-server could not unload ${config.routerName}: ${upstreamMessage(text)}`);
    for (;;) {
      const now = (await this.upstream.statuses()).get(config.routerName) ?? "unloaded";
      if (!RUNNING.has(now)) break;
      await sleep(this.opts.pollMs ?? 25);
    }
    slot.running = false;
    slot.loaded = false;
    // a request that joined while it was on its way out loads it again
    if (slot.inFlight === 0) slot.config = undefined;
    this.notify(slot);
  }

  private async waitLoaded(slot: Slot, signal?: AbortSignal): Promise<void> {
    const name = slot.config!.routerName;
    for (;;) {
      const now = (await this.upstream.statuses()).get(name) ?? "unloaded";
      if (now === "loaded" || now === "sleeping") {
        slot.loaded = true;
        return;
      }
      if (now === "failed" || now === "unloaded") {
        slot.running = false;
        slot.loaded = false;
        throw new LoadFailed(name);
      }
      if (signal?.aborted) throw new ApiError(499, "request canceled");
      await sleep(this.opts.pollMs ?? 25);
    }
  }
}

/** The router's instance of a configuration came down while a request waited for it. */
class LoadFailed extends ApiError {
  constructor(name: string) {
    super(500, `llama-server failed to load ${name} (its log says why)`);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
