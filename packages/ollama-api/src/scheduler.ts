import { FOREVER_MS } from "./duration";
import { ApiError, upstreamMessage } from "./errors";
import type { LoadConfig, LoadWant } from "./load-config";
import type { RouterStatus, Upstream } from "./upstream";

/**
 * What the scheduler asks of the outside world: load and unload a configuration, and which are
 * running. The decisions (ModelScheduler) never wait on these; each answer comes back as an event.
 */
export interface ModelIo {
  /** Starts `config` and resolves once it answers requests; rejects with why it could not (an ApiError). `keep`: router names that must stay known. */
  load(config: LoadConfig, keep: ReadonlySet<string>): Promise<void>;
  /** Stops `config`; resolves once it is gone. */
  unload(config: LoadConfig): Promise<void>;
  /** The router names running now (loaded or loading). */
  running(): Promise<ReadonlySet<string>>;
}

/** Time, for keep_alive: wall-clock milliseconds and a cancellable timer. */
export interface Clock {
  now(): number;
  /** Calls `fn` after `ms` (any length); the function returned cancels it. */
  after(ms: number, fn: () => void): () => void;
}

export interface SchedulerOptions {
  /** Models loaded at once; 0: no limit. */
  maxLoaded: number;
  /** How long an idle model stays loaded when the request that loaded it names no keep_alive (ms; Infinity: forever). */
  keepAliveMs: number;
  /** Requests waiting for a model at once before more are refused with 503 (OLLAMA_MAX_QUEUE; default 512). */
  maxQueue?: number;
  clock?: Clock;
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
   * last looked): no request joins it any more, and once idle it is unloaded, so the next
   * request loads it again. Call before release().
   */
  lost(): void;
}

/** What Ollama answers when OLLAMA_MAX_QUEUE requests are already waiting (server/sched.go ErrMaxQueue). */
export const SERVER_BUSY = "server busy, please try again.  maximum pending requests exceeded";


/**
 * One Ollama model's place in the router. `phase` undefined: not loaded. A loaded model is
 * `loading`, then `ready`, then `unloading`; while a slot `drains`, no request that came after
 * the one that made it drain gets a lease, and it is unloaded as soon as it is idle.
 */
interface Slot {
  name: string;
  phase?: "loading" | "ready" | "unloading";
  /** The configuration loading, ready or unloading. */
  config?: LoadConfig;
  /** Requests holding a lease: while any does, the slot is not unloaded. */
  inFlight: number;
  /** Set: the slot must go; only requests older than this sequence number may still join it. */
  drainAfter?: number;
  /** It drains to make room for another model (and may be swapped for one that goes idle first). */
  evicted?: boolean;
  keepAliveMs: number;
  /** When it last became ready (clock ms): a request that waited past it waited for a load. */
  readyAt: number;
  /** An order of use (higher: more recent), for least-recently-used eviction. */
  lastUsed: number;
  /** When an idle slot is unloaded (clock ms), while its keep_alive timer runs. */
  expiresAt?: number;
  cancelTimer?: () => void;
  /** Bumped at every load: an answer from the outside world about an older load is ignored. */
  epoch: number;
  /** Callers of unload() waiting for the slot to be gone. */
  gone: Array<() => void>;
}

/** A request waiting for its model. */
interface Waiter {
  seq: number;
  name: string;
  want: LoadWant;
  keepAliveMs?: number;
  start: number;
  resolve(l: Lease): void;
  reject(e: unknown): void;
  detach(): void;
}

/** Whether the loaded configuration `c` can answer a request that wants `w`. */
function serves(c: LoadConfig, w: LoadWant): boolean {
  return c.routerName === w.config.routerName || (w.flexible && c.numCtx >= w.config.numCtx);
}

/**
 * Which models are loaded in the router, and in which configuration, decided in one place.
 *
 * A state machine driven by events (a request comes, is cancelled or released; a load or an
 * unload ends; a keep_alive runs out), each handled synchronously to the end by `pump`, which
 * decides everything that can be decided and starts the loads and unloads it decided on. Nothing
 * here waits while holding anything: a request either gets its lease at once or waits in one
 * queue, in order of arrival, and every decision is taken again, from the whole state, at the
 * next event. Hence:
 * - a model with a request in flight is never unloaded, and never more than `maxLoaded` are
 *   loaded, loading or unloading at once;
 * - a request for a loaded model that serves it is answered at once, unless that model drains;
 * - a request that needs another model when every place is taken picks the least recently used
 *   idle model to unload, else the least recently used busy one, which drains: requests that
 *   came after it wait, so a stream of requests cannot keep it loaded for ever (if another model
 *   goes idle first, that one goes instead);
 * - a request that needs another configuration of a loaded model (a larger num_ctx) makes it
 *   drain, then it is loaded again in the configuration asked for, as Ollama reloads a runner
 *   whose options differ;
 * - a configuration that failed to load is tried again only when a place is free: it never
 *   unloads a working model again, and the requests that waited for it get llama-server's reason;
 * - a request whose client has gone leaves the queue at once; OLLAMA_MAX_QUEUE requests waiting
 *   make the next one a 503 "server busy", as in Ollama.
 * llama-server's own limit (--models-max) is not used: two concurrent first requests could make
 * it evict the same idle model, after which one waits for a place nobody frees.
 */
export class ModelScheduler {
  private readonly slots = new Map<string, Slot>();
  private readonly waiting: Waiter[] = [];
  /** Requests are numbered in order of arrival. */
  private seq = 0;
  private uses = 0;
  private closed = false;
  private readonly clock: Clock;
  private readonly maxQueue: number;

  constructor(
    private readonly io: ModelIo,
    private readonly opts: SchedulerOptions,
  ) {
    this.clock = opts.clock ?? realClock;
    this.maxQueue = opts.maxQueue ?? 512;
  }

  /**
   * Holds model `name` loaded in a configuration that serves `want` for one request: at once when
   * it is, else once it has been loaded (after whatever unload makes room for it).
   */
  acquire(name: string, want: LoadWant, keepAliveMs?: number, signal?: AbortSignal): Promise<Lease> {
    if (this.closed) return Promise.reject(new ApiError(503, "the server is shutting down"));
    if (signal?.aborted) return Promise.reject(canceled());
    const slot = this.slot(name);
    const start = this.clock.now();
    if (slot.phase === "ready" && slot.drainAfter === undefined && serves(slot.config!, want)) return Promise.resolve(this.lease(slot, keepAliveMs, 0));
    if (this.waiting.length >= this.maxQueue) return Promise.reject(new ApiError(503, SERVER_BUSY));
    return new Promise<Lease>((resolve, reject) => {
      const onAbort = () => {
        const i = this.waiting.indexOf(w);
        if (i < 0) return;
        this.waiting.splice(i, 1);
        reject(canceled());
        this.pump();
      };
      const w: Waiter = { seq: ++this.seq, name, want, keepAliveMs, start, resolve, reject, detach: () => signal?.removeEventListener("abort", onAbort) };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiting.push(w);
      this.pump();
    });
  }

  /**
   * keep_alive 0 with nothing to answer: the model is unloaded as soon as it is idle. Resolves
   * once it is gone, or at once when requests still hold it.
   */
  unload(name: string): Promise<void> {
    const slot = this.slots.get(name);
    if (!slot?.phase) return Promise.resolve();
    slot.keepAliveMs = 0;
    if (slot.inFlight > 0) return Promise.resolve();
    const gone = new Promise<void>((resolve) => slot.gone.push(resolve));
    this.pump();
    return gone;
  }

  /**
   * The files behind `name` changed (a create, copy or pull over it, or it was deleted): its
   * instance takes no new request and goes once the requests it holds are done, so the next
   * request loads the new files. Resolves once it is gone (at once when nothing is loaded).
   */
  retire(name: string): Promise<void> {
    for (const k of this.failures.keys()) if (k === name || k.startsWith(`${name}~`)) this.failures.delete(k);
    const slot = this.slots.get(name);
    if (!slot?.phase) return Promise.resolve();
    if (slot.phase !== "unloading") this.drain(slot);
    const gone = new Promise<void>((resolve) => slot.gone.push(resolve));
    this.pump();
    return gone;
  }

  /** Whether requests hold `name` now. */
  busy(name: string): boolean {
    return (this.slots.get(name)?.inFlight ?? 0) > 0;
  }

  /** The configuration of `name` loaded or loading (undefined: none). */
  configOf(name: string): LoadConfig | undefined {
    return this.slots.get(name)?.config;
  }

  /** When an idle loaded model will be unloaded (undefined: not loaded); a busy one, or one kept for ever, its keep_alive from now. */
  expiresAt(name: string): number | undefined {
    const s = this.slots.get(name);
    if (!s?.phase) return undefined;
    return s.expiresAt ?? this.clock.now() + Math.min(s.keepAliveMs, FOREVER_MS);
  }

  /** How many requests wait for a model (for tests and status). */
  get queued(): number {
    return this.waiting.length;
  }

  /**
   * The router said `lease`'s instance is gone (instanceGone): the lease is let go as lost, and a
   * new one is taken, which waits for the model to be unloaded and loads it again.
   */
  renew(lease: Lease, name: string, want: LoadWant, keepAliveMs?: number, signal?: AbortSignal): Promise<Lease> {
    lease.lost();
    lease.release();
    return this.acquire(name, want, keepAliveMs, signal);
  }

  /** An answer failed: ask the router whether the model still runs; if not, the next request loads it again. */
  suspect(name: string): void {
    const s = this.slots.get(name);
    if (s?.phase !== "ready") return;
    const { epoch } = s;
    this.io.running().then(
      (running) => {
        if (this.closed || s.epoch !== epoch || s.phase !== "ready" || running.has(s.config!.routerName)) return;
        this.opts.onStatus?.(`${s.config!.routerName} is no longer running in llama-server; the next request loads it again`);
        this.drain(s);
        this.pump();
      },
      () => undefined, // the router is not answering: the next request finds out
    );
  }

  close(): void {
    this.closed = true;
    for (const w of this.waiting.splice(0)) {
      w.detach();
      w.reject(new ApiError(503, "the server is shutting down"));
    }
    for (const s of this.slots.values()) {
      s.cancelTimer?.();
      for (const g of s.gone.splice(0)) g();
    }
  }

  private slot(name: string): Slot {
    let s = this.slots.get(name);
    if (!s) {
      s = { name, inFlight: 0, keepAliveMs: this.opts.keepAliveMs, readyAt: 0, lastUsed: 0, epoch: 0, gone: [] };
      this.slots.set(name, s);
    }
    return s;
  }

  private lease(slot: Slot, keepAliveMs: number | undefined, loadMs: number): Lease {
    slot.inFlight++;
    slot.lastUsed = ++this.uses;
    if (keepAliveMs !== undefined) slot.keepAliveMs = keepAliveMs;
    slot.cancelTimer?.();
    slot.cancelTimer = undefined;
    slot.expiresAt = undefined;
    const { epoch } = slot;
    let released = false;
    return {
      target: slot.config!.routerName,
      loadMs,
      release: () => {
        if (released) return;
        released = true;
        slot.inFlight--;
        slot.lastUsed = ++this.uses;
        this.pump();
      },
      lost: () => {
        if (!released && slot.epoch === epoch) this.drain(slot);
      },
    };
  }

  /** No request joins the slot any more; it goes once idle. */
  private drain(slot: Slot): void {
    slot.drainAfter = 0;
    slot.evicted = undefined;
  }

  /** Decides all that can be decided now, in order of arrival, and starts the loads and unloads decided on. */
  private pump(): void {
    if (this.closed) return;
    const slots = [...this.slots.values()];
    // a model evicted while busy gives way to one that has gone idle since, and stays when
    // nobody needs its place any more (the request it was evicted for was cancelled)
    const needPlace = this.waiting.some((w) => this.slots.get(w.name)?.phase === undefined || this.slots.get(w.name)?.phase === "unloading");
    for (const busy of slots.filter((s) => s.evicted && s.phase === "ready" && s.inFlight > 0)) {
      const idle = needPlace ? this.victim(true) : undefined;
      if (needPlace && !idle) break;
      busy.drainAfter = busy.evicted = undefined;
      if (idle) this.evict(idle, `another model (${busy.name} is busy)`);
    }
    let free = this.opts.maxLoaded > 0 ? this.opts.maxLoaded - slots.filter((s) => s.phase).length : Infinity;
    /** Places that will come free without a new decision. */
    let coming = slots.filter((s) => s.phase === "unloading" || (s.phase === "ready" && s.drainAfter !== undefined)).length;
    const placed = new Set<Slot>();
    for (const w of [...this.waiting]) {
      const s = this.slot(w.name);
      const failed = this.failures.get(w.want.config.routerName);
      if (s.phase === "ready" || s.phase === "loading") {
        if (serves(s.config!, w.want) && (s.drainAfter === undefined || w.seq < s.drainAfter)) {
          if (s.phase === "ready") this.grant(w, s);
          continue;
        }
        if (s.drainAfter !== undefined) continue;
        if (failed) {
          this.refuse(w, failed);
          continue;
        }
        // another configuration of this model: the one loaded goes once its requests are done
        this.opts.onStatus?.(`unloading ${s.config!.routerName} to load ${w.want.config.routerName}`);
        s.drainAfter = w.seq;
        if (s.phase === "ready") coming++;
        continue;
      }
      if (s.phase === "unloading" || placed.has(s)) continue;
      placed.add(s);
      if (free > 0) {
        free--;
        this.startLoad(s, w);
        continue;
      }
      if (failed) {
        this.refuse(w, failed);
        continue;
      }
      if (coming > 0) {
        coming--;
        continue;
      }
      const victim = this.victim(false);
      if (victim) this.evict(victim, `${w.name} (${this.opts.maxLoaded} loaded at most)`);
      // else every place is loading or going: the next event decides again
    }
    for (const s of slots) {
      if (s.phase !== "ready" || s.inFlight > 0) continue;
      if (s.drainAfter === undefined && s.keepAliveMs <= 0) s.drainAfter = 0;
      if (s.drainAfter !== undefined) this.startUnload(s);
      else if (!s.cancelTimer && s.keepAliveMs !== Infinity) this.arm(s);
    }
  }

  /** The model to unload for another: the least recently used idle one, else (unless `idleOnly`) the least recently used busy one. */
  private victim(idleOnly: boolean): Slot | undefined {
    const candidates = [...this.slots.values()].filter((s) => s.phase === "ready" && s.drainAfter === undefined && (!idleOnly || s.inFlight === 0));
    candidates.sort((a, b) => Number(a.inFlight > 0) - Number(b.inFlight > 0) || a.lastUsed - b.lastUsed);
    return candidates[0];
  }

  private evict(s: Slot, forWhat: string): void {
    this.opts.onStatus?.(`unloading ${s.name} to make room for ${forWhat}`);
    s.drainAfter = 0;
    s.evicted = true;
  }

  private grant(w: Waiter, s: Slot): void {
    this.waiting.splice(this.waiting.indexOf(w), 1);
    w.detach();
    w.resolve(this.lease(s, w.keepAliveMs, s.readyAt >= w.start ? this.clock.now() - w.start : 0));
  }

  private refuse(w: Waiter, e: unknown): void {
    this.waiting.splice(this.waiting.indexOf(w), 1);
    w.detach();
    w.reject(e);
  }

  /** Why each configuration that failed to load last time did (cleared when it loads). */
  private readonly failures = new Map<string, unknown>();

  private startLoad(s: Slot, w: Waiter): void {
    const config = w.want.config;
    s.phase = "loading";
    s.config = config;
    s.epoch++;
    s.drainAfter = s.evicted = undefined;
    // a fresh load: its keep_alive is this request's, else the server's
    s.keepAliveMs = w.keepAliveMs ?? this.opts.keepAliveMs;
    const { epoch } = s;
    const keep = new Set([...this.slots.values()].flatMap((x) => (x.config ? [x.config.routerName] : [])).concat(this.waiting.map((x) => x.want.config.routerName)));
    this.io.load(config, keep).then(
      () => {
        if (this.closed || s.epoch !== epoch) return;
        this.failures.delete(config.routerName);
        s.phase = "ready";
        s.readyAt = this.clock.now();
        s.lastUsed = ++this.uses;
        this.pump();
      },
      (e: unknown) => {
        if (this.closed || s.epoch !== epoch) return;
        this.failures.set(config.routerName, e);
        this.gone(s);
        // those that asked for exactly this configuration get the reason; the others try theirs
        for (const x of this.waiting.filter((x) => x.name === s.name && x.want.config.routerName === config.routerName)) this.refuse(x, e);
        this.pump();
      },
    );
  }

  private startUnload(s: Slot): void {
    s.phase = "unloading";
    s.cancelTimer?.();
    s.cancelTimer = undefined;
    s.expiresAt = undefined;
    const { epoch } = s;
    const config = s.config!;
    const attempt = () =>
      this.io.unload(config).then(
        () => {
          if (this.closed || s.epoch !== epoch) return;
          this.gone(s);
          this.pump();
        },
        (e: unknown) => {
          if (this.closed || s.epoch !== epoch) return;
          // still loaded as far as we know: it keeps its place, and we ask again
          this.opts.onStatus?.(`warning: unloading ${config.routerName}: ${(e as Error).message}; trying again in a second`);
          s.cancelTimer = this.clock.after(1000, () => {
            s.cancelTimer = undefined;
            void attempt();
          });
        },
      );
    void attempt();
  }

  private gone(s: Slot): void {
    s.phase = s.config = s.drainAfter = s.evicted = s.expiresAt = undefined;
    s.cancelTimer?.();
    s.cancelTimer = undefined;
    for (const g of s.gone.splice(0)) g();
  }

  /** An idle slot's keep_alive starts. */
  private arm(s: Slot): void {
    const ms = Math.min(s.keepAliveMs, FOREVER_MS);
    s.expiresAt = this.clock.now() + ms;
    s.cancelTimer = this.clock.after(ms, () => {
      s.cancelTimer = undefined;
      if (s.phase !== "ready" || s.inFlight > 0 || s.drainAfter !== undefined) return;
      this.opts.onStatus?.(`unloading ${s.name} (idle for its keep_alive)`);
      s.drainAfter = 0;
      this.pump();
    });
  }
}

const canceled = () => new ApiError(499, "request canceled");

/** setTimeout holds at most 2^31-1 ms: longer waits are made of several. */
const realClock: Clock = {
  now: () => Date.now(),
  after(ms, fn) {
    const end = Date.now() + ms;
    let timer: NodeJS.Timeout;
    const wait = () => {
      const left = end - Date.now();
      if (left <= 0) return fn();
      timer = setTimeout(wait, Math.min(left, 2 ** 31 - 1));
      timer.unref();
    };
    timer = setTimeout(wait, Math.min(ms, 2 ** 31 - 1));
    timer.unref();
    return () => clearTimeout(timer);
  },
};

const RUNNING: ReadonlySet<RouterStatus> = new Set(["loaded", "loading", "sleeping"]);

/**
 * ModelIo over llama-server's router: POST /models/load and /models/unload, then GET /models
 * until the instance is up (or down). A load that fails is reported with llama-server's own
 * error line from the router's log (what Ollama reports of a runner that dies loading).
 */
export class RouterModels implements ModelIo {
  constructor(
    private readonly upstream: Upstream,
    private readonly opts: {
      /** Makes the router know a configuration before it is loaded (its preset section). */
      define?(config: LoadConfig, keep: ReadonlySet<string>): Promise<void>;
      /** llama-server's last error line about a router name, if it printed one. */
      errorOf?(routerName: string): string | undefined;
      pollMs?: number;
    } = {},
  ) {}

  async load(config: LoadConfig, keep: ReadonlySet<string>): Promise<void> {
    await this.opts.define?.(config, keep);
    const name = config.routerName;
    const { status, text } = await this.upstream.call("POST", "/models/load", { model: name });
    if (status !== 200 && !/already running/.test(text)) throw new ApiError(500, `llama-server could not start ${name}: ${upstreamMessage(text)}`);
    for (;;) {
      const now = (await this.upstream.statuses()).get(name) ?? "unloaded";
      if (now === "loaded" || now === "sleeping") return;
      if (!RUNNING.has(now)) {
        // the router reports the exit before its log thread may have passed on the last lines
        await sleep(100);
        const why = this.opts.errorOf?.(name);
        throw new ApiError(500, `llama-server could not load ${name}: ${why ?? "its instance exited while loading (its log says why)"}`);
      }
      await sleep(this.opts.pollMs ?? 25);
    }
  }

  async unload(config: LoadConfig): Promise<void> {
    const name = config.routerName;
    const { status, text } = await this.upstream.call("POST", "/models/unload", { model: name });
    if (status !== 200 && !/not running/.test(text)) throw new ApiError(500, `llama-server could not unload ${name}: ${upstreamMessage(text)}`);
    while (RUNNING.has((await this.upstream.statuses()).get(name) ?? "unloaded")) await sleep(this.opts.pollMs ?? 25);
  }

  async running(): Promise<ReadonlySet<string>> {
    const out = new Set<string>();
    for (const [name, status] of await this.upstream.statuses()) if (RUNNING.has(status)) out.add(name);
    return out;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
