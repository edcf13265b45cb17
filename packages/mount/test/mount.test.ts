import { execFileSync, spawn } from "node:child_process";
import { open, readdir, readFile, readlink, stat, writeFile, mkdir, rm, rename, truncate, unlink, copyFile, appendFile } from "node:fs/promises";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { fileDigest, allFixtureVariants, generateFixtureFiles } from "@compat/testkit";
import { FuseMount, fuseSupport, MountError, planView, SidecarStore } from "@compat/mount";
import { mountState } from "../src/mounts";
import { addView, tempDirs, viewsOf } from "./helpers";

const t = tempDirs();

/** A gemma3 vision fixture (Ollama layout), its two views, and their files as translate writes them. */
async function gemma3(dir: string) {
  const src = await generateFixtureFiles("gemma3", { seed: 7, layout: "ollama", variant: "4b-vision" }, join(dir, "src"));
  const { text, mmproj } = await viewsOf(src.text);
  await text!.writeTo(join(dir, "text.gguf"));
  await mmproj!.writeTo(join(dir, "mmproj.gguf"));
  return { source: src.text, text: text!, mmproj: mmproj! };
}

/** Every byte of a file, read to its end (a short read is not the end: the next read says why). */
async function readAll(path: string): Promise<Buffer> {
  const fh = await open(path, "r");
  try {
    const parts: Buffer[] = [];
    for (let at = 0; ; ) {
      const b = Buffer.alloc(1 << 16);
      const { bytesRead } = await fh.read(b, 0, b.length, at);
      if (bytesRead === 0) return Buffer.concat(parts);
      parts.push(b.subarray(0, bytesRead));
      at += bytesRead;
    }
  } finally {
    await fh.close();
  }
}

async function expectErrno(p: Promise<unknown>, code: string): Promise<void> {
  await expect(p).rejects.toMatchObject({ code });
}

describe("FUSE on this machine", () => {
  it("is usable (CI must fail, not skip, where it is not)", () => {
    expect(fuseSupport()).toMatchObject({ usable: true });
  });
});

describe("bytes through the mount", () => {
  it("equal translate's output for every fixture architecture, text and mmproj", async () => {
    const dir = await t.dir();
    const mount = await t.mount(dir);
    const checked: string[] = [];
    for (const { arch, variant } of allFixtureVariants()) {
      const src = await generateFixtureFiles(arch, { seed: 3, layout: "ollama", variant }, join(dir, "src", `${arch}-${variant}`));
      const views = await viewsOf(src.text);
      for (const [kind, view] of Object.entries(views)) {
        if (view === null) continue;
        const written = join(dir, "out", `${arch}-${variant}-${kind}.gguf`);
        await mkdir(join(dir, "out"), { recursive: true });
        await view.writeTo(written);
        const at = `${arch}-${variant}/${kind}.gguf`;
        await addView(mount, at, view, `${arch}/${variant}/${kind}`);
        expect(await fileDigest(join(mount.dir, at)), at).toBe(await fileDigest(written));
        expect((await stat(join(mount.dir, at))).size).toBe(view.size);
        checked.push(at);
        await view.close();
      }
    }
    // every architecture, and a projector for every vision variant
    expect(new Set(checked.map((c) => c.split("-")[0]))).toEqual(new Set(allFixtureVariants().map((v) => v.arch.split("-")[0])));
    expect(checked.filter((c) => c.endsWith("mmproj.gguf")).length).toBe(allFixtureVariants().filter((v) => v.vision).length);
  }, 600_000);

  it("any range read equals view.read of the same range", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const mount = await t.mount(dir);
    await addView(mount, "m/text.gguf", g.text, "text");
    await addView(mount, "m/mmproj.gguf", g.mmproj, "mmproj");
    for (const [name, view] of [["text", g.text], ["mmproj", g.mmproj]] as const) {
      const fh = await open(join(mount.dir, "m", `${name}.gguf`), "r");
      try {
        await fc.assert(
          fc.asyncProperty(fc.nat({ max: view.size + 100 }), fc.nat({ max: 3 << 20 }), async (offset, length) => {
            const want = await view.read(offset, length);
            const got = Buffer.alloc(length);
            const { bytesRead } = await fh.read(got, 0, length, offset);
            expect(bytesRead).toBe(want.length);
            expect(Buffer.compare(got.subarray(0, bytesRead), want)).toBe(0);
          }),
          { numRuns: 60, seed: 28 },
        );
      } finally {
        await fh.close();
      }
    }
  });

  it("serves the same bytes when the source is not in the page cache (read from the disk directly) as when it is", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const mount = await t.mount(dir);
    await addView(mount, "m/text.gguf", g.text, "text");
    const file = join(mount.dir, "m/text.gguf");
    // GNU dd: drops a file's clean pages from the page cache, reading nothing (any user, its own files)
    const evict = (path: string) => execFileSync("dd", [`if=${path}`, "iflag=nocache", "count=0", "status=none"]);
    evict(g.source);
    expect(await fileDigest(file)).toBe(await fileDigest(join(dir, "text.gguf")));
    const fh = await open(file, "r");
    try {
      await fc.assert(
        fc.asyncProperty(fc.nat({ max: g.text.size + 100 }), fc.nat({ max: 3 << 20 }), fc.boolean(), async (offset, length, cold) => {
          if (cold) evict(g.source); // else partly cached: what the reads before left
          evict(file); // the mount's own pages would answer without the daemon
          const want = await g.text.read(offset, length);
          const got = Buffer.alloc(length);
          const { bytesRead } = await fh.read(got, 0, length, offset);
          expect(bytesRead).toBe(want.length);
          expect(Buffer.compare(got.subarray(0, bytesRead), want)).toBe(0);
        }),
        { numRuns: 40, seed: 40 },
      );
    } finally {
      await fh.close();
    }
  });

  it("computes a sidecar once, on first read, and a later mount reuses it", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const { computed } = await planView(g.mmproj, { sidecarPath: () => "" });
    expect(computed.length).toBeGreaterThan(0); // the gemma3 projector promotes tensors to F32
    const m1 = await t.mount(dir);
    await addView(m1, "mmproj.gguf", g.mmproj, "mmproj");
    expect(await readdir(join(dir, "sidecars")).catch(() => [])).toEqual([]); // nothing computed before a read
    expect(await fileDigest(join(m1.dir, "mmproj.gguf"))).toBe(await fileDigest(join(dir, "mmproj.gguf")));
    const written = execFileSync("find", [join(dir, "sidecars"), "-name", "*.bin"], { encoding: "utf8" }).trim().split("\n");
    expect(written.length).toBe(computed.length);
    const mtimes = await Promise.all(written.map(async (p) => (await stat(p)).mtimeMs));
    await m1.close();
    // a new mount of the same translation reads the sidecars as they are
    const m2 = await t.mount(dir);
    const { plan } = await planView(g.mmproj, { sidecarPath: (tn, i) => m2.sidecars.pathFor("mmproj", tn, i) });
    await m2.addFile("mmproj.gguf", plan, []); // no way to compute: it must not need to
    expect(await fileDigest(join(m2.dir, "mmproj.gguf"))).toBe(await fileDigest(join(dir, "mmproj.gguf")));
    expect(await Promise.all(written.map(async (p) => (await stat(p)).mtimeMs))).toEqual(mtimes);
  });

  it("a sidecar changed on disk with its size and mtime kept is found before it is served, removed and computed again", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const want = await fileDigest(join(dir, "mmproj.gguf"));
    const m1 = await t.mount(dir);
    await addView(m1, "mmproj.gguf", g.mmproj, "mmproj");
    expect(await fileDigest(join(m1.dir, "mmproj.gguf"))).toBe(want);
    await m1.close();
    const sidecars = execFileSync("find", [join(dir, "sidecars"), "-name", "*.bin"], { encoding: "utf8" }).trim().split("\n");
    const flip = async (path: string) => {
      const before = await stat(path, { bigint: true });
      execFileSync("touch", ["-r", path, join(dir, "times")]); // its times, to the nanosecond
      const fh = await open(path, "r+");
      const at = Math.floor((Number(before.size) - 32) / 2); // in the bytes, not in the digest after them
      const b = Buffer.alloc(8);
      await fh.read(b, 0, 8, at);
      for (let i = 0; i < 8; i++) b[i]! ^= 0xff;
      await fh.write(b, 0, 8, at);
      await fh.close();
      execFileSync("touch", ["-r", join(dir, "times"), path]);
      const after = await stat(path, { bigint: true });
      expect([after.size, after.mtimeNs]).toEqual([before.size, before.mtimeNs]);
    };
    // each version found whole is remembered beside it; a write moves the ctime, so it is no longer that version
    for (const p of sidecars) expect((await stat(p + ".hashed")).isFile()).toBe(true);
    // a new mount of the same translation: the flipped sidecar is not served
    await flip(sidecars[0]!);
    const lines: string[] = [];
    const m2 = await t.mount(dir, { onLog: (l) => lines.push(l) });
    await addView(m2, "mmproj.gguf", g.mmproj, "mmproj");
    expect(await fileDigest(join(m2.dir, "mmproj.gguf")), lines.join("\n")).toBe(want);
    expect(lines.filter((l) => l.includes(sidecars[0]!))).toEqual([expect.stringMatching(/do not match .*removed, computing it again/)]);
    // in the same mount, between two opens of the file: checked again at the next open
    await flip(sidecars[sidecars.length - 1]!);
    await writeFile("/proc/sys/vm/drop_caches", "3"); // else the kernel serves its cached (good) pages without asking
    expect(await fileDigest(join(m2.dir, "mmproj.gguf")), lines.join("\n")).toBe(want);
    expect(lines.filter((l) => l.includes(sidecars[sidecars.length - 1]!))).toEqual([expect.stringMatching(/do not match .*removed, computing it again/)]);
    // a sidecar with no digest after its bytes (a writer of another version) is not used either
    const last = sidecars[sidecars.length - 1]!;
    await truncate(last, (await stat(last)).size - 32);
    await m2.close();
    const m3 = await t.mount(dir, { onLog: (l) => lines.push(l) });
    const { plan } = await planView(g.mmproj, { sidecarPath: (tn, i) => m3.sidecars.pathFor("mmproj", tn, i) });
    await m3.addFile("mmproj.gguf", plan, []); // nothing can compute it here: EIO, never its bytes
    await expectErrno(readAll(join(m3.dir, "mmproj.gguf")), "EIO");
    expect(lines.some((l) => l.includes(last) && /bytes where \d+ and their sha256 were written: removed$/.test(l))).toBe(true);
  });

  it("two files that share their sidecars (two names of one model): removing one leaves the other whole", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const mount = await t.mount(dir);
    await addView(mount, "a/mmproj.gguf", g.mmproj, "mmproj");
    await addView(mount, "b/mmproj.gguf", g.mmproj, "mmproj");
    const want = await fileDigest(join(dir, "mmproj.gguf"));
    expect(await fileDigest(join(mount.dir, "a/mmproj.gguf"))).toBe(want);
    await mount.remove("a/mmproj.gguf");
    expect(await fileDigest(join(mount.dir, "b/mmproj.gguf"))).toBe(want); // its sidecars are still vouched for
  });

  it("serves ops that only join bytes from the source: glmocr's gate+up concat writes no sidecar", async () => {
    const dir = await t.dir();
    const src = await generateFixtureFiles("glmocr", { seed: 5, layout: "ollama" }, join(dir, "src"));
    const { text } = await viewsOf(src.text);
    const joins = text!.model.tensors.filter((x) => x.data.kind === "computed" && x.data.label === "concat ffn_gate+ffn_up");
    expect(joins.length).toBeGreaterThan(0);
    await text!.writeTo(join(dir, "text.gguf"));
    const { plan, computed } = await planView(text!, { sidecarPath: (tn, i) => join(dir, "sidecars", `${i}.bin`) });
    expect(computed).toEqual([]); // nothing to compute: every op of this model only joins bytes
    expect(plan.sidecars).toEqual([]);
    const mount = await t.mount(dir);
    await addView(mount, "glmocr.gguf", text!, "glmocr");
    expect(await fileDigest(join(mount.dir, "glmocr.gguf"))).toBe(await fileDigest(join(dir, "text.gguf")));
    expect(await readdir(join(dir, "sidecars")).catch(() => [])).toEqual([]);
    await text!.close();
  });

  it("a mount sweeps the temp files of sidecar writers that died", async () => {
    const dir = await t.dir();
    const stale = join(dir, "sidecars/ab/cdef.bin.999999999.0123abcd.tmp");
    const live = join(dir, "sidecars/ab/cdef.bin." + process.pid + ".0123abcd.tmp");
    await mkdir(join(dir, "sidecars/ab"), { recursive: true });
    await writeFile(stale, "x");
    await writeFile(live, "x");
    await t.mount(dir);
    expect((await readdir(join(dir, "sidecars/ab"))).sort()).toEqual([live.split("/").pop()]);
  });

  it("picks up files added and removed while mounted, and prunes empty folders", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const mount = await t.mount(dir);
    expect(await readdir(mount.dir)).toEqual([]);
    await addView(mount, "a/a.gguf", g.text, "text");
    await mount.addLink("native.gguf", g.source);
    expect((await readdir(mount.dir)).sort()).toEqual(["a", "native.gguf"]);
    expect(await readlink(join(mount.dir, "native.gguf"))).toBe(g.source);
    expect(await fileDigest(join(mount.dir, "native.gguf"))).toBe(await fileDigest(g.source));
    await mount.remove("a/a.gguf");
    expect(await readdir(mount.dir)).toEqual(["native.gguf"]);
    await expectErrno(stat(join(mount.dir, "a/a.gguf")), "ENOENT");
    // replacing a file at the same path serves the new bytes at once
    await addView(mount, "x.gguf", g.text, "text");
    expect(await fileDigest(join(mount.dir, "x.gguf"))).toBe(await fileDigest(join(dir, "text.gguf")));
    await addView(mount, "x.gguf", g.mmproj, "mmproj");
    expect(await fileDigest(join(mount.dir, "x.gguf"))).toBe(await fileDigest(join(dir, "mmproj.gguf")));
  });
});

describe("faults", () => {
  it("is read-only: every write is EROFS", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const mount = await t.mount(dir);
    await addView(mount, "m/text.gguf", g.text, "text");
    const f = join(mount.dir, "m/text.gguf");
    await expectErrno(open(f, "r+"), "EROFS");
    await expectErrno(appendFile(f, "x"), "EROFS");
    await expectErrno(truncate(f, 0), "EROFS");
    await expectErrno(unlink(f), "EROFS");
    await expectErrno(rename(f, join(mount.dir, "m/y.gguf")), "EROFS");
    await expectErrno(writeFile(join(mount.dir, "new.gguf"), "x"), "EROFS");
    await expectErrno(mkdir(join(mount.dir, "d")), "EROFS");
    await expectErrno(copyFile(join(dir, "text.gguf"), join(mount.dir, "m/copy.gguf")), "EROFS");
    expect(await fileDigest(f)).toBe(await fileDigest(join(dir, "text.gguf")));
  });

  for (const how of ["removed", "replaced", "written in place", "written through mmap (its mtime set back)", "truncated"] as const) {
    it(`a source ${how} under the mount gives EIO, also for pages read before`, async () => {
      const dir = await t.dir();
      const g = await gemma3(dir);
      const mount = await t.mount(dir);
      await addView(mount, "m/text.gguf", g.text, "text");
      const f = join(mount.dir, "m/text.gguf");
      expect(await fileDigest(f)).toBe(await fileDigest(join(dir, "text.gguf"))); // every page now in the kernel's cache
      const fh = await open(f, "r");
      const source = g.source;
      if (how === "removed") await rm(source);
      else if (how === "replaced") {
        await copyFile(source, `${source}.new`);
        await rename(`${source}.new`, source); // same bytes, another file: not the one planned
      } else if (how === "written in place") {
        const w = await open(source, "r+");
        await w.write(Buffer.from([1, 2, 3, 4]), 0, 4, (await stat(source)).size - 4);
        await w.close();
      } else if (how === "written through mmap (its mtime set back)") {
        // a write through a shared mapping makes no inotify event; setting the mtime back makes
        // size and mtime what was planned: only the ctime, which nothing sets back, still tells
        const mmapWrite = `import mmap, os, sys
p = sys.argv[1]
st = os.stat(p)
with open(p, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[st.st_size - 4:st.st_size] = bytes([1, 2, 3, 4])
    m.flush()
    m.close()
os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
assert os.stat(p).st_mtime_ns == st.st_mtime_ns`;
        execFileSync("python3", ["-c", mmapWrite, source]);
      } else await truncate(source, (await stat(source)).size - 4096);
      // the watch invalidates the cached pages; a read that still raced it checks the source itself
      await new Promise((r) => setTimeout(r, 200));
      const buf = Buffer.alloc(1 << 16);
      await expectErrno(fh.read(buf, 0, buf.length, (await stat(f)).size - buf.length), "EIO");
      await fh.close();
      await expectErrno(readAll(f), "EIO");
      // the header comes from memory, but a file whose source is gone does not open
      await expectErrno(open(f, "r"), "EIO");
    });
  }

  it("refuses a plan whose source changed after it was planned", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const mount = await t.mount(dir);
    const { plan } = await planView(g.text, { sidecarPath: () => join(dir, "unused") });
    await copyFile(g.source, `${g.source}.new`);
    await rename(`${g.source}.new`, g.source);
    await expect(mount.addFile("x.gguf", plan)).rejects.toMatchObject({ code: "REJECTED" });
    await expectErrno(stat(join(mount.dir, "x.gguf")), "ENOENT");
  });

  it("a sidecar that cannot be computed gives EIO, and the rest of the file still reads", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const mount = await t.mount(dir);
    const { plan, computed } = await planView(g.mmproj, { sidecarPath: (tn, i) => mount.sidecars.pathFor("broken", tn, i) });
    const broken = computed.map((c) => ({ ...c, produce: () => Promise.reject(new Error("no bytes today")) }));
    await mount.addFile("mmproj.gguf", plan, broken);
    await expectErrno(readAll(join(mount.dir, "mmproj.gguf")), "EIO");
    const fh = await open(join(mount.dir, "mmproj.gguf"), "r");
    const head = Buffer.alloc(4);
    await fh.read(head, 0, 4, 0);
    await fh.close();
    expect(head.toString("latin1")).toBe("GGUF");
  });

  it("is private to the user unless allowOther", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    execFileSync("chmod", ["-R", "a+rX", dir]);
    const asNobody = (path: string) => {
      try {
        execFileSync("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat", path], { stdio: ["ignore", "ignore", "pipe"] });
        return "read";
      } catch (e) {
        return String((e as { stderr: Buffer }).stderr);
      }
    };
    const priv = await t.mount(dir);
    await addView(priv, "text.gguf", g.text, "text");
    expect(asNobody(join(priv.dir, "text.gguf"))).toMatch(/Permission denied/);
    await priv.close();
    const shared = await t.mount(dir, { allowOther: true });
    await addView(shared, "text.gguf", g.text, "text");
    expect(asNobody(join(shared.dir, "text.gguf"))).toBe("read");
  });

  it("a daemon killed with SIGKILL leaves a stale mount that the next mount detaches", async () => {
    const dir = await t.dir();
    const g = await gemma3(dir);
    const mount = await t.mount(dir);
    await addView(mount, "text.gguf", g.text, "text");
    const fh = await open(join(mount.dir, "text.gguf"), "r");
    process.kill(mount.pid, "SIGKILL");
    await mount.exited;
    expect(await mountState(mount.dir)).toBe("stale");
    // a reader gets an error, not bytes
    await expectErrno(fh.read(Buffer.alloc(4096), 0, 4096, 1 << 16), "ENOTCONN");
    await fh.close().catch(() => undefined);
    const again = await t.mount(dir);
    expect(again.dir).toBe(mount.dir);
    await addView(again, "text.gguf", g.text, "text");
    expect(await fileDigest(join(again.dir, "text.gguf"))).toBe(await fileDigest(join(dir, "text.gguf")));
    await again.close();
    expect(await mountState(again.dir)).toBe("none");
  });

  it("refuses a live mount point and a folder that is not empty", async () => {
    const dir = await t.dir();
    const mount = await t.mount(dir);
    await expect(FuseMount.mount(mount.dir, { sidecars: join(dir, "s2") })).rejects.toMatchObject({ code: "ALREADY_MOUNTED" });
    await mkdir(join(dir, "full"));
    await writeFile(join(dir, "full/keep.txt"), "mine");
    const refused = await FuseMount.mount(join(dir, "full"), { sidecars: join(dir, "s2") }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(MountError);
    expect(refused).toMatchObject({ code: "BAD_MOUNTPOINT" });
  });

  it("fails with the daemon's last line, not a hang, when the daemon exits while the sidecar folder is swept", async () => {
    const dir = await t.dir();
    const marker = join(dir, "daemon-pid");
    const daemon = join(dir, "exits-at-once");
    await writeFile(daemon, `#!/bin/sh\necho "no fuse here" >&2\necho $$ > '${marker}'\nexit 1\n`, { mode: 0o755 });
    // a sweep that ends only once the daemon is gone (reaped: its exit already emitted)
    class SlowSweep extends SidecarStore {
      override async sweep(): Promise<void> {
        for (;;) {
          const pid = Number((await readFile(marker, "utf8").catch(() => "")).trim());
          if (pid > 0) {
            try {
              process.kill(pid, 0);
            } catch {
              break;
            }
          }
          await new Promise((r) => setTimeout(r, 20));
        }
        await new Promise((r) => setTimeout(r, 100));
        return super.sweep();
      }
    }
    const failed = await FuseMount.mount(join(dir, "mnt"), { sidecars: new SlowSweep(join(dir, "s")), env: { ...process.env, OLLAMA_COMPAT_MOUNTD: daemon } }).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(MountError);
    expect(failed).toMatchObject({ code: "MOUNT_FAILED" });
    expect((failed as Error).message).toContain("no fuse here");
  });

  it("unmounts when its controller dies, however it dies", async () => {
    const dir = await t.dir();
    const point = join(dir, "mnt");
    // a controller in its own process, killed with SIGKILL once it has mounted
    const script = `import(${JSON.stringify(join(__dirname, "../src/index.ts"))}).then(async (m) => { await m.FuseMount.mount(${JSON.stringify(point)}, { sidecars: ${JSON.stringify(join(dir, "s"))} }); console.log("mounted"); setInterval(() => {}, 1000); });`;
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on("data", (d: Buffer) => d.toString().includes("mounted") && resolve());
      child.once("exit", (c) => reject(new Error(`controller exited ${c}`)));
    });
    expect(await mountState(point)).toBe("live");
    child.kill("SIGKILL");
    for (let i = 0; i < 100 && (await mountState(point)) !== "none"; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await mountState(point)).toBe("none");
  });
});
