// UTF-8 helpers tuned for GGUF vocabularies: mostly short ASCII strings.

const lenient = new TextDecoder("utf-8", { ignoreBOM: true });
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

interface NodeBufferLike {
  readonly length: number;
  toString(encoding: "utf8", start: number, end: number): string;
  /** Node's own UTF-8 slicer behind toString (no argument juggling); absent on look-alike polyfills. */
  utf8Slice?(start: number, end: number): string;
}
type NodeBufferCtor = { from(buffer: ArrayBufferLike, byteOffset: number, length: number): NodeBufferLike };
const NodeBuffer = (globalThis as { Buffer?: NodeBufferCtor }).Buffer;

type Slicer = (start: number, end: number) => string;

/** Node's native UTF-8 slicer over `region` (through a Buffer view), or undefined off Node. */
export function nativeSlicer(region: Uint8Array): Slicer | undefined {
  if (NodeBuffer === undefined) return undefined;
  const buf = NodeBuffer.from(region.buffer, region.byteOffset, region.length);
  if (typeof buf.utf8Slice === "function") {
    const len = buf.length;
    // Clamped like toString, which ends at the buffer's end instead of throwing.
    return (start, end) => buf.utf8Slice!(Math.min(start, len), Math.min(end, len));
  }
  return (start, end) => buf.toString("utf8", start, end);
}

/**
 * A decoder for many slices of one region (a string array). On Node it goes through a
 * Buffer view, whose native slicer is ~4x faster per short string than anything in JS.
 */
export function sliceDecoder(region: Uint8Array): Slicer {
  return nativeSlicer(region) ?? ((start, end) => decodeUtf8(region, start, end));
}

/**
 * Every item of a string array at once: one loop straight over Node's native slicer (no
 * per-item closure or clamping; the offsets come from the parser), into an array sized once.
 */
export function decodeItems(region: Uint8Array, starts: Uint32Array, lengths: Uint32Array): string[] {
  const n = starts.length;
  const out = new Array<string>(n);
  const buf = NodeBuffer?.from(region.buffer, region.byteOffset, region.length);
  if (buf !== undefined && typeof buf.utf8Slice === "function") {
    for (let i = 0; i < n; i++) out[i] = buf.utf8Slice(starts[i]!, starts[i]! + lengths[i]!);
  } else {
    for (let i = 0; i < n; i++) out[i] = decodeUtf8(region, starts[i]!, starts[i]! + lengths[i]!);
  }
  return out;
}

/**
 * Decode bytes already validated as UTF-8. Strings of up to 12 bytes (most vocabulary
 * tokens) are decoded by hand, faster than a TextDecoder call; longer ones go to the decoder,
 * which is faster from there and makes one flat string where `+=` would make a chain of cons
 * strings (V8 makes one per append from 13 characters on).
 */
export function decodeUtf8(bytes: Uint8Array, start: number, end: number): string {
  if (end - start > 12) return lenient.decode(bytes.subarray(start, end));
  let s = "";
  let i = start;
  while (i < end) {
    const b = bytes[i]!;
    if (b < 0x80) {
      s += String.fromCharCode(b);
      i += 1;
    } else if (b >= 0xc2 && b < 0xe0 && i + 1 < end) {
      s += String.fromCharCode(((b & 0x1f) << 6) | (bytes[i + 1]! & 0x3f));
      i += 2;
    } else if (b >= 0xe0 && b < 0xf0 && i + 2 < end) {
      s += String.fromCharCode(((b & 0x0f) << 12) | ((bytes[i + 1]! & 0x3f) << 6) | (bytes[i + 2]! & 0x3f));
      i += 3;
    } else if (b >= 0xf0 && b < 0xf5 && i + 3 < end) {
      s += String.fromCodePoint(((b & 0x07) << 18) | ((bytes[i + 1]! & 0x3f) << 12) | ((bytes[i + 2]! & 0x3f) << 6) | (bytes[i + 3]! & 0x3f));
      i += 4;
    } else {
      return lenient.decode(bytes.subarray(start, end)); // not valid UTF-8: let the decoder substitute
    }
  }
  return s;
}

type Utf8Check = (bytes: Uint8Array) => boolean;

/**
 * Node's buffer.isUtf8 (SIMD, no allocation) when running on Node; reached through
 * process.getBuiltinModule so browser bundles never import node:buffer.
 */
const nativeIsUtf8: Utf8Check | undefined = (() => {
  const proc = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  const mod = proc?.getBuiltinModule?.("node:buffer") as { isUtf8?: Utf8Check } | undefined;
  return typeof mod?.isUtf8 === "function" ? mod.isUtf8 : undefined;
})();

/**
 * Decode with validation; returns undefined when the bytes are not valid UTF-8. `slice`
 * (nativeSlicer of the same bytes) decodes short ASCII strings, such as keys and tensor
 * names, natively. Never built a character at a time: that makes a chain of cons strings
 * (about ten per tensor name), which the model would keep.
 */
export function decodeUtf8Strict(bytes: Uint8Array, start: number, end: number, slice?: Slicer): string | undefined {
  if (end - start <= 48) {
    let i = start;
    while (i < end && bytes[i]! < 0x80) i++;
    if (i === end) return slice !== undefined ? slice(start, end) : lenient.decode(bytes.subarray(start, end));
  }
  if (nativeIsUtf8 !== undefined) {
    return nativeIsUtf8(bytes.subarray(start, end)) ? lenient.decode(bytes.subarray(start, end)) : undefined;
  }
  try {
    return strict.decode(bytes.subarray(start, end));
  } catch {
    return undefined;
  }
}

/** True if bytes[start, end) is valid UTF-8. */
export function isValidUtf8(bytes: Uint8Array, start: number, end: number): boolean {
  if (start === end) return true;
  if (nativeIsUtf8 !== undefined) return nativeIsUtf8(bytes.subarray(start, end));
  try {
    strict.decode(bytes.subarray(start, end));
    return true;
  } catch {
    return false;
  }
}

/** Upper bound of the UTF-8 size of a JS string. */
function maxUtf8Length(s: string): number {
  return s.length * 3;
}

/**
 * Write `s` as UTF-8 at `pos` (room for s.length*3 bytes must exist); returns bytes written.
 * A plain loop: for the short strings of a vocabulary it beats TextEncoder.encodeInto.
 * Lone surrogates become U+FFFD, as with TextEncoder.
 */
export function encodeUtf8Into(s: string, out: Uint8Array, pos: number): number {
  const n = s.length;
  if (n > 256) return encoder.encodeInto(s, out.subarray(pos)).written;
  let p = pos;
  for (let i = 0; i < n; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      out[p++] = c;
    } else if (c < 0x800) {
      out[p++] = 0xc0 | (c >> 6);
      out[p++] = 0x80 | (c & 0x3f);
    } else if (c >= 0xd800 && c < 0xe000) {
      const next = i + 1 < n ? s.charCodeAt(i + 1) : 0;
      if (c < 0xdc00 && next >= 0xdc00 && next < 0xe000) {
        c = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
        i++;
        out[p++] = 0xf0 | (c >> 18);
        out[p++] = 0x80 | ((c >> 12) & 0x3f);
        out[p++] = 0x80 | ((c >> 6) & 0x3f);
        out[p++] = 0x80 | (c & 0x3f);
      } else {
        out[p++] = 0xef;
        out[p++] = 0xbf;
        out[p++] = 0xbd;
      }
    } else {
      out[p++] = 0xe0 | (c >> 12);
      out[p++] = 0x80 | ((c >> 6) & 0x3f);
      out[p++] = 0x80 | (c & 0x3f);
    }
  }
  return p - pos;
}

export function encodeUtf8(s: string): Uint8Array {
  return encoder.encode(s);
}
