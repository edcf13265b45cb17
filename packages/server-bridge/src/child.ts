import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { request } from "node:http";
import { createServer } from "node:net";
import { BridgeError } from "./errors";

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The last lines it printed (stdout and stderr, interleaved). */
  lastLines: string[];
}

export interface ChildOptions {
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  /** Called with every line the child prints. */
  onLog?(line: string): void;
  /** Lines kept for error reports. Default 40. */
  keepLines?: number;
}

/**
 * The command line that runs `command` so that it dies with this process, however this
 * process ends (SIGKILL included, when no handler of ours runs): on Linux, util-linux's
 * `setpriv --pdeathsig KILL` has the kernel kill it when we die. setpriv sets that before it
 * execs a shell, which execs the command only if we are still its parent: a parent that died
 * before the death signal was set (the child was already orphaned) gets no child at all. Both
 * exec in place, so the pid, the signals and the exit status are the command's own.
 * Elsewhere (or without setpriv) the command runs as it is.
 */
export function tiedToParent(command: string, args: readonly string[]): { command: string; args: string[] } {
  const setpriv = pdeathsigRunner();
  if (!setpriv) return { command, args: [...args] };
  const onlyIfOurs = 'if [ "$PPID" != "$0" ]; then exit 125; fi; exec "$@"';
  return { command: setpriv, args: ["--pdeathsig", "KILL", "--", "/bin/sh", "-c", onlyIfOurs, String(process.pid), command, ...args] };
}

let runner: string | null | undefined;

/** Where setpriv may be: the first of these that exists is asked (with /bin/sh there to run the command). */
function setprivCandidate(): string | undefined {
  if (process.platform !== "linux") return undefined;
  for (const path of ["/usr/bin/setpriv", "/bin/setpriv"]) {
    try {
      accessSync(path, constants.X_OK);
      accessSync("/bin/sh", constants.X_OK);
      return path;
    } catch {
      continue;
    }
  }
  return undefined;
}

/** The option's name as the program's own option table and help text spell it (the bytes are looked for in the program). */
const PDEATHSIG = Buffer.from("--pdeathsig");
/** A setpriv larger than this is not util-linux's (about 50 KB): it is not read, and not used. */
const SETPRIV_MAX_BYTES = 4 << 20;

/** Whether the program `path` offers --pdeathsig: its file holds the option's name (util-linux 2.33+). */
export function offersPdeathsig(path: string): boolean {
  try {
    if (statSync(path).size > SETPRIV_MAX_BYTES) return false;
    return readFileSync(path).includes(PDEATHSIG);
  } catch {
    return false;
  }
}

/**
 * setpriv with --pdeathsig (util-linux 2.33+, part of every Debian and Ubuntu), found once per
 * process. The question is put to the program's file, not to the program: `setpriv --help` was a
 * process of its own, a fork of this whole process on the start's main thread (about 17 ms of
 * serve --all's CPU on a 2-core guest), where reading its 50 KB takes well under a millisecond.
 */
function pdeathsigRunner(): string | null {
  if (runner !== undefined) return runner;
  const path = setprivCandidate();
  runner = path !== undefined && offersPdeathsig(path) ? path : null;
  return runner;
}

/** llama-server's line once it listens (server.cpp: `listening on http://127.0.0.1:8080`, `[::1]` for IPv6; any prefix or colours of its logger around it). */
const LISTENING_ON = /listening on https?:\/\/\S*:(\d+)/;

/** A llama.cpp process whose output is split into lines, with its last lines kept for reports; it dies with us (tiedToParent). */
export class LlamaChild {
  readonly process: ChildProcess;
  readonly exited: Promise<ExitInfo>;
  private readonly lines: string[] = [];
  private readonly keep: number;
  /**
   * The port its log said it listens on (llama-server's "listening on http://HOST:PORT", printed
   * once bound), if it said so: the child's own pipe, where /proc takes milliseconds to ask.
   */
  announcedPort: number | undefined;
  /** Settles at the next line printed (then a new one is made): what a wait for the child's start wakes on. */
  private lineSeen: { promise: Promise<void>; resolve(): void } | undefined;

  constructor(opts: ChildOptions) {
    this.keep = opts.keepLines ?? 40;
    const run = tiedToParent(opts.command, opts.args);
    this.process = spawn(run.command, run.args, { env: opts.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    const onLine = (line: string) => {
      if (this.announcedPort === undefined) {
        const port = LISTENING_ON.exec(line)?.[1];
        if (port !== undefined) this.announcedPort = Number(port);
      }
      this.lines.push(line);
      if (this.lines.length > this.keep) this.lines.shift();
      const seen = this.lineSeen;
      this.lineSeen = undefined;
      seen?.resolve();
      opts.onLog?.(line);
    };
    for (const stream of [this.process.stdout, this.process.stderr]) {
      let partial = "";
      stream?.setEncoding("utf8");
      stream?.on("data", (chunk: string) => {
        const parts = (partial + chunk).split(/\r?\n/);
        partial = parts.pop() ?? "";
        for (const p of parts) onLine(p);
      });
      stream?.on("end", () => {
        if (partial) onLine(partial);
        partial = "";
      });
    }
    this.exited = new Promise((resolve) => {
      this.process.once("error", (e) => {
        onLine(`spawn failed: ${e.message}`);
        // 'exit' does not follow a failed spawn
        if (this.process.pid === undefined) resolve({ code: null, signal: null, lastLines: this.lastLines() });
      });
      this.process.once("close", (code, signal) => {
        resolve({ code, signal, lastLines: this.lastLines() });
      });
    });
  }

  get pid(): number | undefined {
    return this.process.pid;
  }

  get running(): boolean {
    return this.process.exitCode === null && this.process.signalCode === null && this.process.pid !== undefined;
  }

  /**
   * Resolves when the child prints its next line. llama-server says what it did (bound its
   * port, loaded its model) in a line, so a start waited on by polling looks again at once
   * rather than at its next tick.
   */
  nextLine(): Promise<void> {
    if (this.lineSeen === undefined) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.lineSeen = { promise, resolve };
    }
    return this.lineSeen.promise;
  }

  lastLines(n = this.keep): string[] {
    return this.lines.slice(-n);
  }

  /** SIGTERM (llama-server shuts down cleanly on it), SIGKILL after `graceMs`. */
  async stop(graceMs = 3_000): Promise<ExitInfo> {
    if (this.running) {
      this.process.kill("SIGTERM");
      const timer = setTimeout(() => {
        if (this.running) this.process.kill("SIGKILL");
      }, graceMs);
      try {
        return await this.exited;
      } finally {
        clearTimeout(timer);
      }
    }
    return this.exited;
  }
}

/** A free loopback port, from the OS. */
export function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, host, () => {
      const a = probe.address();
      const port = typeof a === "object" && a ? a.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/**
 * The TCP port process `pid` listens on, read from /proc (Linux): the inodes of its sockets,
 * matched against the kernel's tables of listening sockets. Undefined while it listens on
 * none, or where /proc cannot tell.
 * The reads are synchronous: /proc is the kernel's memory, where libuv's four threads may be
 * busy with the start's own file work (the store's listing, the mount's first scan), and a look
 * queued behind it saw llama-server's port tens of ms late. A process's fds take microseconds to
 * list; a table of sockets takes milliseconds (see below), so it is read only once there is a
 * socket to find in it.
 */
export async function listeningPort(pid: number): Promise<number | undefined> {
  const sockets = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      // its stdio: /dev/null and libuv's pipes, which are socket pairs
      if (Number(fd) <= 2) continue;
      const inode = /^socket:\[(\d+)\]$/.exec(readlinkOr(`/proc/${pid}/fd/${fd}`))?.[1];
      if (inode) sockets.add(inode);
    }
  } catch {
    return undefined;
  }
  // a read of a table walks the kernel's whole hash of TCP connections (262,144 buckets on a
  // machine of 24 GiB: about 4 ms each), so the tables are read only once it has a socket of its own
  if (sockets.size === 0) return undefined;
  for (const table of ["tcp", "tcp6"]) {
    const text = readTextOr(`/proc/${pid}/net/${table}`);
    for (const line of text.split("\n").slice(1)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && f[3] === "0A" && sockets.has(f[9]!)) return parseInt(f[1]!.split(":").pop()!, 16);
    }
  }
  return undefined;
}

function readlinkOr(path: string): string {
  try {
    return readlinkSync(path);
  } catch {
    return "";
  }
}

function readTextOr(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

/** Whether listeningPort() can find a child's port here. */
export const canReadListeningPorts = process.platform === "linux";

/** Fails with PORT_IN_USE when something already listens on host:port. */
export function checkPortFree(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", (e: NodeJS.ErrnoException) => {
      if (e.code === "EADDRINUSE") reject(new BridgeError("PORT_IN_USE", `port ${port} on ${host} is already in use`, { host, port }));
      else reject(e);
    });
    probe.listen(port, host, () => probe.close(() => resolve()));
  });
}

/**
 * What most likely killed a llama.cpp process that died of `signal` while it loaded, and the
 * way around it; undefined for the signals a parent sends (SIGTERM, SIGINT, SIGKILL, ...).
 */
export function crashCause(signal: NodeJS.Signals | null): { cause: string; workaround?: string } | undefined {
  switch (signal) {
    case "SIGSEGV":
    case "SIGBUS":
      // Seen on Intel CPUs with AMX: llama.cpp puts Q4_0/Q8_0/K-quant weights in the AMX (or
      // CPU repack) buffer type and crashes at warm-up; the same file loads with --no-repack.
      return {
        cause: "most likely its CPU backend's repacked weights (on CPUs with AMX or AVX-512, llama.cpp repacks Q4_0, Q8_0 and K-quant weights into buffer types of their own, and some crash at warm-up)",
        workaround: "--no-repack",
      };
    case "SIGILL":
      return { cause: "it was built for CPU instructions this machine lacks (build it for this CPU, e.g. with scripts/build-llama-tools.sh)" };
    case "SIGABRT":
      return { cause: "llama.cpp aborted (a failed GGML_ASSERT or an uncaught exception; its last lines say where)" };
    case "SIGFPE":
      return { cause: "an arithmetic fault in llama.cpp (often a model dimension of zero)" };
    default:
      return undefined;
  }
}

/**
 * Polls GET /health until it answers 200. Fails with SERVER_START_FAILED (with the exit
 * code and last log lines) if the child exits first, SERVER_START_TIMEOUT after `timeoutMs`.
 */
export async function waitHealthy(child: LlamaChild, url: string, timeoutMs: number, what = "llama-server"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "no answer";
  let exited: ExitInfo | undefined;
  void child.exited.then((e) => (exited = e));
  for (;;) {
    if (exited || !child.running) {
      const e = exited ?? (await child.exited);
      const tail = e.lastLines.join("\n");
      if (/couldn't bind|address already in use/i.test(tail)) {
        throw new BridgeError("PORT_IN_USE", `${what} could not bind its port (${url}):\n${tail}`, { url, exitCode: e.code, lastLines: e.lastLines });
      }
      // llama.cpp logs from a worker thread that is not flushed at exit, so a fast failure can print nothing
      const said = tail || "(no output: llama.cpp's asynchronous logger can lose its last lines when the process exits at once)";
      const crash = crashCause(e.signal);
      if (crash) {
        const around = crash.workaround ? `; start it with ${crash.workaround}` : "";
        throw new BridgeError("SERVER_CRASHED", `${what} was killed by ${e.signal} before it was ready: ${crash.cause}${around}\n${said}`, {
          exitCode: e.code,
          signal: e.signal,
          lastLines: e.lastLines,
          ...(crash.workaround ? { workaround: crash.workaround } : {}),
        });
      }
      throw new BridgeError("SERVER_START_FAILED", `${what} exited (${e.code ?? e.signal}) before it was ready:\n${said}`, {
        exitCode: e.code,
        signal: e.signal,
        lastLines: e.lastLines,
      });
    }
    if (Date.now() > deadline) {
      const lines = child.lastLines();
      await child.stop();
      throw new BridgeError("SERVER_START_TIMEOUT", `${what} not ready after ${timeoutMs} ms (${last}):\n${lines.join("\n")}`, { lastLines: lines });
    }
    try {
      const { status } = await httpGet(`${url}/health`, 2_000);
      if (status === 200) return;
      last = `HTTP ${status}`;
    } catch {
      // not listening yet
    }
    // a line printed (its model loaded, say) is looked at soon; at most one look every 10 ms however fast it prints
    await Promise.race([sleep(150), child.exited, child.nextLine().then(() => sleep(10))]);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The most httpGet reads of an answer (a router's /models of thousands of models is a few MiB). */
const HTTP_GET_MAX_BYTES = 16 << 20;

/**
 * A GET of `url` (with `key` as its bearer token, if given): its status and body, over node:http
 * rather than fetch: fetch refuses the ports of the Fetch standard's "bad port" list (6000,
 * 6665-6669, 22, ...) without ever connecting, and a llama-server a user put on one of them
 * would never look healthy.
 */
export function httpGet(url: string, timeoutMs: number, key?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const headers = key !== undefined ? { authorization: `Bearer ${key}` } : undefined;
    const req = request(url, { method: "GET", timeout: timeoutMs, agent: false, headers }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        size += c.length;
        // what llama-server answers here is small: whatever answers more is not it
        if (size > HTTP_GET_MAX_BYTES) req.destroy(new Error(`${url} answered more than ${HTTP_GET_MAX_BYTES} bytes`));
        else chunks.push(c);
      });
      res.once("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      res.once("error", reject);
    });
    req.once("timeout", () => req.destroy(new Error(`no answer from ${url} in ${timeoutMs} ms`)));
    req.once("error", reject);
    req.end();
  });
}
