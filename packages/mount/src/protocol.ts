import type { FilePlan } from "./plan";

// The messages between a mount and its daemon (native/mountd.c reads and writes the same):
// u32 length of what follows, u8 type, u32 id, payload; integers little-endian, strings as
// u32 length + UTF-8 bytes.

/** Controller to daemon. */
const Request = { ADD_FILE: 1, ADD_LINK: 2, REMOVE: 3, FILLED: 4, STOP: 5 } as const;
type Request = (typeof Request)[keyof typeof Request];

/** Daemon to controller. */
export const Reply = {
  /** Mounted and serving; `code` is the daemon's pid, `text` the mount point. */
  READY: 64,
  /** The answer to request `id`: `code` 0 or an errno, `text` why. */
  ACK: 65,
  /** Make sure the sidecar file named by `text` is whole (check it, or write it), then answer FILLED with this id. */
  FILL: 66,
} as const;
export type Reply = (typeof Reply)[keyof typeof Reply];

const EXTENT_KIND = { zero: 0, memory: 1, source: 2, sidecar: 3 } as const;

class Encoder {
  private parts: Uint8Array[] = [];
  private cur = Buffer.alloc(4096);
  private pos = 0;
  private room(n: number): void {
    if (this.pos + n <= this.cur.length) return;
    this.parts.push(this.cur.subarray(0, this.pos));
    this.cur = Buffer.alloc(Math.max(4096, n));
    this.pos = 0;
  }
  u8(v: number): this {
    this.room(1);
    this.cur.writeUInt8(v, this.pos);
    this.pos += 1;
    return this;
  }
  u32(v: number): this {
    this.room(4);
    this.cur.writeUInt32LE(v >>> 0, this.pos);
    this.pos += 4;
    return this;
  }
  u64(v: number | bigint): this {
    this.room(8);
    this.cur.writeBigUInt64LE(BigInt(v), this.pos);
    this.pos += 8;
    return this;
  }
  i64(v: bigint): this {
    this.room(8);
    this.cur.writeBigInt64LE(v, this.pos);
    this.pos += 8;
    return this;
  }
  str(s: string): this {
    const b = Buffer.from(s, "utf8");
    return this.u32(b.length).bytes(b);
  }
  bytes(b: Uint8Array): this {
    this.parts.push(this.cur.subarray(0, this.pos), b);
    this.cur = Buffer.alloc(4096);
    this.pos = 0;
    return this;
  }
  /** The framed message: length, then everything written. */
  frame(): Buffer {
    const body = Buffer.concat([...this.parts, this.cur.subarray(0, this.pos)]);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(body.length);
    return Buffer.concat([len, body]);
  }
}

const start = (type: Request, id: number) => new Encoder().u8(type).u32(id);

export function addFileMessage(id: number, path: string, plan: FilePlan): Buffer {
  const e = start(Request.ADD_FILE, id).str(path).i64(plan.mtimeNs).u64(plan.size);
  e.u32(plan.sources.length);
  for (const s of plan.sources) e.str(s.path).u64(s.dev).u64(s.ino).u64(s.size).i64(s.mtimeNs);
  e.u32(plan.sidecars.length);
  for (const s of plan.sidecars) e.str(s.path).u64(s.length);
  e.u32(plan.extents.length);
  for (const x of plan.extents) {
    e.u64(x.at).u8(EXTENT_KIND[x.kind]);
    e.u32(x.kind === "source" ? x.source : x.kind === "sidecar" ? x.sidecar : 0);
    e.u64(x.kind === "zero" ? 0 : x.offset);
    e.u64(x.length);
  }
  return e.u64(plan.memory.length).bytes(plan.memory).frame();
}

export function addLinkMessage(id: number, path: string, target: string, mtimeNs: bigint): Buffer {
  return start(Request.ADD_LINK, id).str(path).str(target).i64(mtimeNs).frame();
}

export function removeMessage(id: number, path: string): Buffer {
  return start(Request.REMOVE, id).str(path).frame();
}

export function filledMessage(fillId: number, errno: number): Buffer {
  return start(Request.FILLED, fillId).u32(errno).frame();
}

export function stopMessage(): Buffer {
  return start(Request.STOP, 0).frame();
}

export interface DaemonMessage {
  type: Reply;
  id: number;
  code: number;
  text: string;
}

/** Splits the daemon's stdout into messages, whatever the chunking. */
export class MessageReader {
  private pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): DaemonMessage[] {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const out: DaemonMessage[] = [];
    while (this.pending.length >= 4) {
      const len = this.pending.readUInt32LE(0);
      if (this.pending.length < 4 + len) break;
      const m = this.pending.subarray(4, 4 + len);
      const textLength = m.readUInt32LE(9);
      out.push({ type: m.readUInt8(0) as Reply, id: m.readUInt32LE(1), code: m.readInt32LE(5), text: m.toString("utf8", 13, 13 + textLength) });
      this.pending = this.pending.subarray(4 + len);
    }
    return out;
  }
}
