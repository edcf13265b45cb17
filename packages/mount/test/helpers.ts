import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";
import { clipView } from "@compat/clip";
import { translate, type TranslatedView } from "@compat/handlers";
import { FuseMount, planView, type MountOptions } from "@compat/mount";

/** A fresh temp dir per call; all removed (after every mount made in them is closed) after the file's tests. */
export function tempDirs(): { dir(): Promise<string>; mount(dir: string, opts?: Partial<MountOptions>): Promise<FuseMount> } {
  const made: string[] = [];
  const mounts: FuseMount[] = [];
  afterAll(async () => {
    for (const m of mounts) await m.close().catch(() => undefined);
    for (const d of made) await rm(d, { recursive: true, force: true });
  });
  return {
    async dir() {
      const d = await mkdtemp(join(tmpdir(), "compat-mount-"));
      made.push(d);
      return d;
    },
    async mount(dir, opts = {}) {
      const m = await FuseMount.mount(join(dir, "mnt"), { sidecars: join(dir, "sidecars"), ...opts });
      mounts.push(m);
      return m;
    },
  };
}

/** The text view and (for vision/audio files) the clip view of a file. */
export async function viewsOf(path: string): Promise<{ text: TranslatedView | null; mmproj: TranslatedView | null }> {
  return { text: await translate(path), mmproj: await clipView(path) };
}

/** Adds a view to a mount at `at`, its sidecars keyed by `key`. */
export async function addView(mount: FuseMount, at: string, view: TranslatedView, key: string): Promise<void> {
  const { plan, computed } = await planView(view, { sidecarPath: (t, i) => mount.sidecars.pathFor(key, t, i) });
  await mount.addFile(at, plan, computed);
}
