// Hand-assembles GGUF bytes field by field, so tests can build files no writer would produce.
export class RawGguf {
  private parts: Uint8Array[] = [];
  constructor(readonly le = true) {}

  private push(n: number, f: (dv: DataView) => void): this {
    const b = new Uint8Array(n);
    f(new DataView(b.buffer));
    this.parts.push(b);
    return this;
  }
  get length(): number {
    return this.parts.reduce((a, p) => a + p.length, 0);
  }
  bytes(b: ArrayLike<number>): this {
    this.parts.push(Uint8Array.from(b));
    return this;
  }
  u8(v: number): this {
    return this.push(1, (d) => d.setUint8(0, v));
  }
  u32(v: number): this {
    return this.push(4, (d) => d.setUint32(0, v, this.le));
  }
  i32(v: number): this {
    return this.push(4, (d) => d.setInt32(0, v, this.le));
  }
  u64(v: number | bigint): this {
    return this.push(8, (d) => d.setBigUint64(0, BigInt.asUintN(64, BigInt(v)), this.le));
  }
  f32(v: number): this {
    return this.push(4, (d) => d.setFloat32(0, v, this.le));
  }
  /** u64 length + bytes; a string is UTF-8 encoded. */
  str(s: string | ArrayLike<number>): this {
    const b = typeof s === "string" ? new TextEncoder().encode(s) : Uint8Array.from(s);
    return this.u64(b.length).bytes(b);
  }
  magic(version = 3): this {
    return this.bytes([0x47, 0x47, 0x55, 0x46]).u32(version);
  }
  /** magic, version, tensor count, kv count */
  header(nTensors: number | bigint, nKv: number | bigint, version = 3): this {
    return this.magic(version).u64(nTensors).u64(nKv);
  }
  kvU32(key: string, v: number): this {
    return this.str(key).i32(4).u32(v);
  }
  kvStr(key: string, v: string | ArrayLike<number>): this {
    return this.str(key).i32(8).str(v);
  }
  /** A tensor info: name, dims, ggml type, offset. */
  tensor(name: string | ArrayLike<number>, shape: (number | bigint)[], type: number, offset: number | bigint): this {
    this.str(name).u32(shape.length);
    for (const d of shape) this.u64(d);
    return this.i32(type).u64(offset);
  }
  padTo(alignment: number): this {
    const r = this.length % alignment;
    return r === 0 ? this : this.bytes(new Uint8Array(alignment - r));
  }
  zeros(n: number): this {
    return this.bytes(new Uint8Array(n));
  }
  build(): Uint8Array<ArrayBuffer> {
    const out = new Uint8Array(this.length);
    let o = 0;
    for (const p of this.parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  }
}
