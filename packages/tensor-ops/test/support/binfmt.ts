/**
 * Just enough ELF64 and PE32+ parsing to check a shared object's target, exports and imports
 * without binutils for the target (so the check runs on any machine).
 */

export interface ElfInfo {
  format: "elf";
  machine: "x86-64" | "aarch64" | number;
  sharedObject: boolean;
  needed: string[];
  /** Defined global/weak dynamic symbols. */
  exports: string[];
  /** Undefined dynamic symbols, with their version (GLIBC_2.17...) when the file has one; weak ones can be absent at run time. */
  imports: { name: string; version?: string; weak: boolean }[];
}

export interface PeInfo {
  format: "pe";
  machine: "x86-64" | "arm64" | number;
  dll: boolean;
  exports: string[];
  /** Imported names per DLL. */
  imports: Map<string, string[]>;
}

function cstr(b: Buffer, at: number): string {
  const end = b.indexOf(0, at);
  return b.toString("latin1", at, end < 0 ? b.length : end);
}

export function parseElf(b: Buffer): ElfInfo {
  if (b.readUInt32BE(0) !== 0x7f454c46) throw new Error("not ELF");
  if (b[4] !== 2 || b[5] !== 1) throw new Error("only ELF64 little-endian");
  const type = b.readUInt16LE(16);
  const m = b.readUInt16LE(18);
  const shoff = Number(b.readBigUInt64LE(0x28));
  const shentsize = b.readUInt16LE(0x3a);
  const shnum = b.readUInt16LE(0x3c);
  const sections = Array.from({ length: shnum }, (_, i) => {
    const o = shoff + i * shentsize;
    return { type: b.readUInt32LE(o + 4), offset: Number(b.readBigUInt64LE(o + 0x18)), size: Number(b.readBigUInt64LE(o + 0x20)), link: b.readUInt32LE(o + 0x28) };
  });
  const strAt = (sec: number, at: number) => cstr(b, sections[sec]!.offset + at);

  const needed: string[] = [];
  const dynamic = sections.find((s) => s.type === 6);
  if (dynamic) {
    for (let o = dynamic.offset; o < dynamic.offset + dynamic.size; o += 16) {
      const tag = b.readBigInt64LE(o);
      if (tag === 0n) break;
      if (tag === 1n) needed.push(strAt(dynamic.link, Number(b.readBigUInt64LE(o + 8))));
    }
  }

  // Version names by index, from .gnu.version_r (what the file needs from each library).
  const versionNames = new Map<number, string>();
  const verneed = sections.find((s) => s.type === 0x6ffffffe);
  if (verneed) {
    let o = verneed.offset;
    for (;;) {
      const cnt = b.readUInt16LE(o + 2);
      let a = o + b.readUInt32LE(o + 8);
      for (let i = 0; i < cnt; i++) {
        versionNames.set(b.readUInt16LE(a + 6), strAt(verneed.link, b.readUInt32LE(a + 8)));
        a += b.readUInt32LE(a + 12);
      }
      const next = b.readUInt32LE(o + 12);
      if (next === 0) break;
      o += next;
    }
  }
  const versym = sections.find((s) => s.type === 0x6fffffff);

  const exports: string[] = [];
  const imports: ElfInfo["imports"] = [];
  const dynsym = sections.find((s) => s.type === 11);
  if (dynsym) {
    for (let i = 1; i < dynsym.size / 24; i++) {
      const o = dynsym.offset + i * 24;
      const name = strAt(dynsym.link, b.readUInt32LE(o));
      const bind = b[o + 4]! >> 4;
      const shndx = b.readUInt16LE(o + 6);
      if (shndx !== 0) {
        if (bind === 1 || bind === 2) exports.push(name);
        continue;
      }
      const v = versym ? b.readUInt16LE(versym.offset + 2 * i) & 0x7fff : 0;
      const version = versionNames.get(v);
      imports.push({ name, weak: bind === 2, ...(version ? { version } : {}) });
    }
  }
  return { format: "elf", machine: m === 62 ? "x86-64" : m === 183 ? "aarch64" : m, sharedObject: type === 3, needed, exports, imports };
}

export function parsePe(b: Buffer): PeInfo {
  if (b.toString("latin1", 0, 2) !== "MZ") throw new Error("not PE (no MZ)");
  const pe = b.readUInt32LE(0x3c);
  if (b.readUInt32BE(pe) !== 0x50450000) throw new Error("not PE");
  const m = b.readUInt16LE(pe + 4);
  const nsec = b.readUInt16LE(pe + 6);
  const optSize = b.readUInt16LE(pe + 20);
  const characteristics = b.readUInt16LE(pe + 22);
  const opt = pe + 24;
  if (b.readUInt16LE(opt) !== 0x20b) throw new Error("only PE32+");
  const dir = (i: number) => ({ rva: b.readUInt32LE(opt + 112 + 8 * i), size: b.readUInt32LE(opt + 116 + 8 * i) });
  const sections = Array.from({ length: nsec }, (_, i) => {
    const o = opt + optSize + 40 * i;
    return { vsize: b.readUInt32LE(o + 8), va: b.readUInt32LE(o + 12), rawSize: b.readUInt32LE(o + 16), raw: b.readUInt32LE(o + 20) };
  });
  const off = (rva: number) => {
    const s = sections.find((x) => rva >= x.va && rva < x.va + Math.max(x.vsize, x.rawSize));
    if (!s) throw new Error(`RVA ${rva} outside every section`);
    return rva - s.va + s.raw;
  };

  const exports: string[] = [];
  const ed = dir(0);
  if (ed.rva) {
    const o = off(ed.rva);
    const n = b.readUInt32LE(o + 24);
    const names = off(b.readUInt32LE(o + 32));
    for (let i = 0; i < n; i++) exports.push(cstr(b, off(b.readUInt32LE(names + 4 * i))));
  }

  const imports = new Map<string, string[]>();
  const id = dir(1);
  if (id.rva) {
    for (let o = off(id.rva); ; o += 20) {
      const lookup = b.readUInt32LE(o) || b.readUInt32LE(o + 16);
      const nameRva = b.readUInt32LE(o + 12);
      if (!lookup && !nameRva) break;
      const names: string[] = [];
      for (let t = off(lookup); ; t += 8) {
        const entry = b.readBigUInt64LE(t);
        if (entry === 0n) break;
        names.push(entry >> 63n ? `#${entry & 0xffffn}` : cstr(b, off(Number(entry & 0x7fffffffn)) + 2));
      }
      imports.set(cstr(b, off(nameRva)), names);
    }
  }
  return { format: "pe", machine: m === 0x8664 ? "x86-64" : m === 0xaa64 ? "arm64" : m, dll: (characteristics & 0x2000) !== 0, exports, imports };
}
