import { expect } from "vitest";

/** Fast byte equality (vitest's deep toEqual is very slow on megabyte arrays); reports the first difference. */
export function expectSameBytes(actual: Uint8Array, expected: Uint8Array): void {
  const a = Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength);
  const b = Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength);
  if (a.equals(b)) return;
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  expect.fail(`bytes differ: lengths ${a.length} vs ${b.length}, first difference at offset ${i}`);
}
