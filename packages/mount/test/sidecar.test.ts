import { existsSync } from "node:fs";
import { mkdtemp, open, readdir, readFile, rm, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { SIDECAR_DIGEST_BYTES, SidecarStore, type ComputedPart } from "@compat/mount";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

function part(path: string, bytes: Uint8Array): ComputedPart {
  return { path, length: bytes.length, tensor: { index: 0, name: "t" }, label: "t (test)", produce: async () => bytes };
}

describe("SidecarStore.verify", () => {
  it("finds any changed byte, a cut or an extra byte, however soon after the write; an intact sidecar is whole from any store", async () => {
    const dir = await mkdtemp(join(tmpdir(), "compat-sidecar-"));
    dirs.push(dir);
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 1, maxLength: 4096 }),
        fc.nat(),
        fc.integer({ min: 1, max: 255 }),
        fc.constantFrom("flip", "cut", "extra"),
        fc.boolean(),
        fc.boolean(),
        async (bytes, where, xor, how, checkedFirst, byWriter) => {
          const path = join(dir, `${n++}.bin`);
          const writer = new SidecarStore(dir);
          await writer.write(part(path, bytes));
          // changed right after it was written (likely in the same clock tick as its `.hashed` file), or after a check
          if (checkedFirst) expect(await new SidecarStore(dir).verify(path, bytes.length)).toEqual({ ok: true });
          const fh = await open(path, "r+");
          if (how === "flip") {
            const at = where % (bytes.length + SIDECAR_DIGEST_BYTES); // the bytes or their digest
            const b = Buffer.alloc(1);
            await fh.read(b, 0, 1, at);
            b[0]! ^= xor;
            await fh.write(b, 0, 1, at);
          } else if (how === "extra") {
            await fh.write(Buffer.from([xor]), 0, 1, bytes.length + SIDECAR_DIGEST_BYTES);
          }
          await fh.close();
          if (how === "cut") await truncate(path, where % (bytes.length + SIDECAR_DIGEST_BYTES));
          // the store that wrote it, before its fsync (it knows the version it wrote), and a new
          // one after it (the `.hashed` file put in place after the change, as a slow fsync
          // would) alike: the change moved the ctime
          if (!byWriter) await writer.settled();
          const check = await (byWriter ? writer : new SidecarStore(dir)).verify(path, bytes.length);
          await writer.settled();
          expect(check).toMatchObject({ ok: false, missing: false });
          expect(existsSync(path)).toBe(false);
          expect(existsSync(`${path}.hashed`)).toBe(false);
          expect(await new SidecarStore(dir).verify(path, bytes.length)).toEqual({ ok: false, missing: true });
        },
      ),
      { numRuns: 80 },
    );
  });
});

describe("SidecarStore.write", () => {
  it("a sidecar reads whole as soon as it is written; its version is kept once it is on the disk; one torn by a crash before then is hashed, found torn and removed", async () => {
    const dir = await mkdtemp(join(tmpdir(), "compat-sidecar-"));
    dirs.push(dir);
    const store = new SidecarStore(dir);
    const bytes = new Uint8Array(100_000).map((_, i) => (i * 7) & 0xff);
    const path = join(dir, "ab", "whole.bin");
    await store.write(part(path, bytes));
    expect(await store.verify(path, bytes.length)).toEqual({ ok: true }); // before its fsync: known to the store that wrote it
    const written = await readFile(path);
    expect(written.length).toBe(bytes.length + SIDECAR_DIGEST_BYTES);
    expect(Buffer.compare(written.subarray(0, bytes.length), bytes)).toBe(0);
    await store.settled();
    expect(existsSync(`${path}.hashed`)).toBe(true);
    expect(await new SidecarStore(dir).verify(path, bytes.length)).toEqual({ ok: true });
    // what a crash before the fsync can leave: the file at its size, its bytes not written (zeros), no `.hashed` file
    const torn = join(dir, "ab", "torn.bin");
    await writeFile(torn, new Uint8Array(bytes.length + SIDECAR_DIGEST_BYTES));
    expect(await new SidecarStore(dir).verify(torn, bytes.length)).toMatchObject({ ok: false, missing: false });
    expect(existsSync(torn)).toBe(false);
    // no temp files left behind
    expect((await readdir(join(dir, "ab"))).sort()).toEqual(["whole.bin", "whole.bin.hashed"]);
  });
});
