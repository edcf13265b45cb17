// UTF-8 helpers tuned for GGUF vocabularies: mostly short ASCII strings.

const lenient = new TextDecoder("utf-8", { ignoreBOM: true });
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

/** Decode bytes known to be valid UTF-8 (or accept U+FFFD for invalid ones). */
export function decodeUtf8(bytes: Uint8Array, start: number, end: number): string {
  if (end - start <= 48) {
    let s = "";
    for (let i = start; i < end; i++) {
      const b = bytes[i]!;
      if (b >= 0x80) return lenient.decode(bytes.subarray(start, end));
      s += String.fromCharCode(b);
    }
    return s;
  }
  return lenient.decode(bytes.subarray(start, end));
}

/** Decode with validation; returns undefined when the bytes are not valid UTF-8. */
export function decodeUtf8Strict(bytes: Uint8Array, start: number, end: number): string | undefined {
  if (end - start <= 48) {
    let s = "";
    let i = start;
    for (; i < end; i++) {
      const b = bytes[i]!;
      if (b >= 0x80) break;
      s += String.fromCharCode(b);
    }
    if (i === end) return s;
  }
  try {
    return strict.decode(bytes.subarray(start, end));
  } catch {
    return undefined;
  }
}

/** True if bytes[start, end) is valid UTF-8. Native decoder does the work. */
export function isValidUtf8(bytes: Uint8Array, start: number, end: number): boolean {
  if (start === end) return true;
  try {
    strict.decode(bytes.subarray(start, end));
    return true;
  } catch {
    return false;
  }
}

/** Upper bound of the UTF-8 size of a JS string. */
export function maxUtf8Length(s: string): number {
  return s.length * 3;
}

/**
 * Write `s` as UTF-8 at `pos` (room for s.length*3 bytes must exist); returns bytes written.
 * ASCII goes through a plain loop, which beats encodeInto for short strings.
 */
export function encodeUtf8Into(s: string, out: Uint8Array, pos: number): number {
  const n = s.length;
  if (n <= 64) {
    let i = 0;
    for (; i < n; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) break;
      out[pos + i] = c;
    }
    if (i === n) return n;
  }
  return encoder.encodeInto(s, out.subarray(pos)).written;
}

export function encodeUtf8(s: string): Uint8Array {
  return encoder.encode(s);
}
