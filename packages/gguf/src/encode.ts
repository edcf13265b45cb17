// Serializes the header (magic .. tensor infos) into one buffer, the way gguf.cpp lays it out.
import { BigIntArray, BoolArray, NestedArray, NumberArray, StringArray, isGgufArray, valueTypeName } from "./arrays";
import { GgufError } from "./errors";
import { HOST_LITTLE_ENDIAN } from "./parse";
import { GgufValueType, type GgufArray, type GgufKv, type GgufValue } from "./types";
import { encodeUtf8Into } from "./utf8";

export class ByteWriter {
  buf: Uint8Array;
  dv: DataView;
  pos = 0;

  constructor(
    readonly le: boolean,
    initial = 1 << 16,
  ) {
    this.buf = new Uint8Array(initial);
    this.dv = new DataView(this.buf.buffer);
  }

  ensure(n: number): void {
    const need = this.pos + n;
    if (need <= this.buf.length) return;
    // Double for small steps; for one big reservation (a whole string array) add a margin only.
    const cap = Math.max(this.buf.length * 2, Math.ceil(need * 1.25));
    const next = new Uint8Array(cap);
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
    this.dv = new DataView(next.buffer);
  }

  u8(v: number): void {
    this.ensure(1);
    this.buf[this.pos++] = v;
  }
  u32(v: number): void {
    this.ensure(4);
    this.dv.setUint32(this.pos, v, this.le);
    this.pos += 4;
  }
  i32(v: number): void {
    this.ensure(4);
    this.dv.setInt32(this.pos, v, this.le);
    this.pos += 4;
  }
  /** A non-negative safe integer as u64. */
  u64n(v: number): void {
    this.ensure(8);
    const lo = v % 0x100000000;
    const hi = (v - lo) / 0x100000000;
    this.dv.setUint32(this.pos + (this.le ? 0 : 4), lo, this.le);
    this.dv.setUint32(this.pos + (this.le ? 4 : 0), hi, this.le);
    this.pos += 8;
  }
  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
  string(s: string): void {
    this.ensure(8 + s.length * 3);
    const at = this.pos;
    const n = encodeUtf8Into(s, this.buf, at + 8);
    this.pos = at;
    this.u64n(n);
    this.pos += n;
  }
  padTo(alignment: number): void {
    const r = this.pos % alignment;
    if (r !== 0) {
      const n = alignment - r;
      this.ensure(n);
      this.buf.fill(0, this.pos, this.pos + n);
      this.pos += n;
    }
  }
  /** The bytes written; copied out when the buffer is mostly slack, so the slack can be freed. */
  result(): Uint8Array {
    if (this.buf.length > this.pos * 1.5 && this.buf.length > 1 << 20) return this.buf.slice(0, this.pos);
    return this.buf.subarray(0, this.pos);
  }
}

function writeScalar(w: ByteWriter, type: GgufValueType, v: GgufValue, key: string): void {
  w.ensure(8);
  const p = w.pos;
  switch (type) {
    case GgufValueType.UINT8:
      w.dv.setUint8(p, v as number);
      w.pos += 1;
      return;
    case GgufValueType.INT8:
      w.dv.setInt8(p, v as number);
      w.pos += 1;
      return;
    case GgufValueType.UINT16:
      w.dv.setUint16(p, v as number, w.le);
      w.pos += 2;
      return;
    case GgufValueType.INT16:
      w.dv.setInt16(p, v as number, w.le);
      w.pos += 2;
      return;
    case GgufValueType.UINT32:
      w.dv.setUint32(p, v as number, w.le);
      w.pos += 4;
      return;
    case GgufValueType.INT32:
      w.dv.setInt32(p, v as number, w.le);
      w.pos += 4;
      return;
    case GgufValueType.FLOAT32:
      w.dv.setFloat32(p, v as number, w.le);
      w.pos += 4;
      return;
    case GgufValueType.FLOAT64:
      w.dv.setFloat64(p, v as number, w.le);
      w.pos += 8;
      return;
    case GgufValueType.UINT64:
      w.dv.setBigUint64(p, v as bigint, w.le);
      w.pos += 8;
      return;
    case GgufValueType.INT64:
      w.dv.setBigInt64(p, v as bigint, w.le);
      w.pos += 8;
      return;
    case GgufValueType.BOOL:
      w.dv.setUint8(p, v ? 1 : 0);
      w.pos += 1;
      return;
    case GgufValueType.STRING:
      w.string(v as string);
      return;
    default:
      throw new GgufError("BAD_VALUE_TYPE", `key "${key}" has unknown value type ${type as number}`);
  }
}

function writeTypedBytes(w: ByteWriter, values: ArrayBufferView & { length: number; BYTES_PER_ELEMENT: number }): void {
  const size = values.BYTES_PER_ELEMENT;
  const raw = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  const at = w.pos;
  w.bytes(raw);
  if (w.le !== HOST_LITTLE_ENDIAN && size > 1) {
    const b = w.buf;
    for (let i = at; i < at + raw.length; i += size) {
      for (let a = i, z = i + size - 1; a < z; a++, z--) {
        const t = b[a]!;
        b[a] = b[z]!;
        b[z] = t;
      }
    }
  }
}

function writeStringItems(w: ByteWriter, arr: StringArray): void {
  const raw = arr.raw;
  if (raw !== undefined && raw.littleEndian === w.le) {
    w.bytes(raw.region);
    return;
  }
  if (raw !== undefined) {
    // Same bytes, other byte order for the length prefixes.
    w.ensure(raw.region.length);
    for (let i = 0; i < arr.length; i++) {
      const s = raw.starts[i]!;
      const n = raw.lengths[i]!;
      w.u64n(n);
      w.buf.set(raw.region.subarray(s, s + n), w.pos);
      w.pos += n;
    }
    return;
  }
  const items = arr.toArray();
  let bound = 0;
  for (const s of items) bound += 8 + s.length * 3;
  w.ensure(bound);
  // One reservation for the whole array, then prefixes and bytes written inline.
  const buf = w.buf;
  const dv = w.dv;
  const le = w.le;
  let p = w.pos;
  for (const s of items) {
    const n = encodeUtf8Into(s, buf, p + 8);
    dv.setUint32(p + (le ? 0 : 4), n, le);
    dv.setUint32(p + (le ? 4 : 0), 0, le);
    p += 8 + n;
  }
  w.pos = p;
}

/** Item type, count and items (the body after an ARRAY tag). */
function writeArrayBody(w: ByteWriter, arr: GgufArray, key: string): void {
  w.i32(arr.itemType);
  w.u64n(arr.length);
  if (arr instanceof NumberArray || arr instanceof BigIntArray) writeTypedBytes(w, arr.values);
  else if (arr instanceof BoolArray) w.bytes(arr.bytes);
  else if (arr instanceof StringArray) writeStringItems(w, arr);
  else if (arr instanceof NestedArray) for (const item of arr.items) writeArrayBody(w, item, key);
  else {
    // A foreign GgufArray implementation: go item by item.
    for (let i = 0; i < arr.length; i++) {
      const v = arr.at(i);
      if (arr.itemType === GgufValueType.ARRAY) {
        if (!isGgufArray(v)) throw new GgufError("BAD_VALUE", `key "${key}": nested item ${i} is not an array`);
        writeArrayBody(w, v, key);
      } else writeScalar(w, arr.itemType, v, key);
    }
  }
}

export function writeKv(w: ByteWriter, kv: GgufKv): void {
  w.string(kv.key);
  w.i32(kv.type);
  if (kv.type === GgufValueType.ARRAY) {
    if (!isGgufArray(kv.value)) throw new GgufError("BAD_VALUE", `key "${kv.key}" has type ARRAY but a ${typeof kv.value} value`);
    writeArrayBody(w, kv.value, kv.key);
  } else {
    if (isGgufArray(kv.value)) throw new GgufError("BAD_VALUE", `key "${kv.key}" holds an array but has type ${valueTypeName(kv.type)}`);
    writeScalar(w, kv.type, kv.value, kv.key);
  }
}
