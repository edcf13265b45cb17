/**
 * `migrate` rows (issue 37): a store of five Ollama gemma3 vision models of BENCH_MIGRATE_MIB
 * each (default 2048: 2 GiB) migrated by the real CLI, against `cp` + `sync` of the same
 * bytes; and the disk a migration adds on an XFS image with reflinks against without, with
 * the floor the issue sets (headers plus the tensors the ops compute). Everything is generated
 * in BENCH_DIR/migrate and deleted after.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { buildOllamaStore } from "@compat/store";
import { pruneMigration, undoMigration } from "../../packages/cli/src/migrate";
import { openViews } from "@compat/views";
import { writeLoadableVisionBlob, writeVisionBlob } from "./files";

/** A blob shaped like a gemma3 vision model (real bytes, a large tower): what the timed row migrates. */
const writeShapedBlob = (path: string, mib: number, name: string) => writeVisionBlob(path, mib, false, name);
import { median } from "./race.mjs";

export interface MigrateBenchContext {
  dir: string;
  /** packages/cli/dist/bin.cjs */
  cli: string;
  runs: number;
  row(r: { scenario: string; ours: string; baseline: string; ratio: number; target: string; pass: boolean | undefined }): void;
  ms(x: number): string;
}

const MODELS = 5;
const MiB = 2 ** 20;

export async function migrateBench(o: MigrateBenchContext): Promise<void> {
  const modelMiB = Number(process.env.BENCH_MIGRATE_MIB ?? 2048);
  const base = join(o.dir, "migrate");
  rmSync(base, { recursive: true, force: true });
  mkdirSync(base, { recursive: true });
  try {
    const root = join(base, "store");
    const sources = await makeStore(root, join(base, "src"), modelMiB);
    const floor = await sharedFloor(sources);
    const gib = `${MODELS} gemma3 vision models of ${modelMiB >= 1024 ? `${(modelMiB / 1024).toFixed(modelMiB % 1024 ? 1 : 0)} GiB` : `${modelMiB} MiB`}`;

    // migrate vs cp + sync of the same bytes, alternated; the store is restored (undo, and the
    // new blobs deleted) between runs, untimed
    const copies = join(base, "copies");
    const migrate = () => cli(o.cli, ["migrate", "--all", "--no-verify"], root);
    const cpSync = () => {
      mkdirSync(copies, { recursive: true });
      const r = spawnSync("sh", ["-c", 'for f in "$@"; do cp "$f" "$COPIES/" || exit 1; done; sync', "sh", ...sources], { env: { ...process.env, COPIES: copies }, stdio: "ignore" });
      if (r.status !== 0) throw new Error(`cp + sync failed (${r.status})`);
    };
    const runs = Math.max(1, Math.min(o.runs, 3));
    const tMigrate: number[] = [];
    const tCp: number[] = [];
    let written = 0;
    for (let r = 0; r < runs; r++) {
      execFileSync("sync");
      tMigrate.push(timed(migrate));
      written = newBlobBytes(root, sources);
      await restore(root);
      execFileSync("sync");
      tCp.push(timed(cpSync));
      rmSync(copies, { recursive: true, force: true });
    }
    const [m, c] = [median(tMigrate), median(tCp)];
    o.row({ scenario: `migrate --all --no-verify of ${gib} vs \`cp\` + \`sync\` of the same blobs`, ours: o.ms(m), baseline: o.ms(c), ratio: m / c, target: "≤ 1.2x", pass: m / c <= 1.2 });

    // verification (llama-server loads each migrated pair before its manifest switches) is a
    // cost of its own, outside the row above, and timed on a store of its own: the blobs above
    // have a vision model's shape but not weights llama-server can load, so every verification
    // of them fails. Five loadable gemma3 vision blobs of the same size, migrated with
    // verification and without, alternated as above (medians).
    const vroot = join(base, "verify-store");
    await makeStore(vroot, join(base, "verify-src"), modelMiB, writeLoadableVisionBlob);
    execFileSync("sync");
    let verified: number | undefined;
    let unverified: number | undefined;
    try {
      const tV: number[] = [];
      const tN: number[] = [];
      // CPU time too (the CLI's and llama-server's, user + sys), which a loaded machine does not stretch as it does wall time
      const cV: number[] = [];
      const cN: number[] = [];
      for (let r = 0; r < runs; r++) {
        let c0 = childCpuMs();
        tN.push(timed(() => cli(o.cli, ["migrate", "--all", "--no-verify"], vroot)));
        cN.push(childCpuMs() - c0);
        await restore(vroot);
        execFileSync("sync");
        c0 = childCpuMs();
        tV.push(timed(() => cli(o.cli, ["migrate", "--all"], vroot)));
        cV.push(childCpuMs() - c0);
        await restore(vroot);
        execFileSync("sync");
        if (process.env.BENCH_VERBOSE) console.error(`    run ${r}: --no-verify ${tN.at(-1)!.toFixed(0)} ms, with verification ${tV.at(-1)!.toFixed(0)} ms`);
      }
      [verified, unverified] = [median(tV), median(tN)];
      console.error(`  CPU time (user + sys) of those migrations: with verification ${o.ms(median(cV))}, --no-verify ${o.ms(median(cN))}`);
    } catch (e) {
      const lines = (e as Error).message.trim().split("\n");
      console.error(`  migrate --all with verification: skipped (${lines[0]!.replace(/:.*/, "")}: ${lines.at(-1)})`);
    }
    rmSync(vroot, { recursive: true, force: true });
    if (verified !== undefined && unverified !== undefined) {
      o.row({ scenario: `  migrate --all with verification (each model loaded by llama-server) vs --no-verify, 5 loadable gemma3 vision models of the same size`, ours: o.ms(verified), baseline: o.ms(unverified), ratio: verified / unverified, target: "verification's cost", pass: undefined });
    }

    // the disk it adds: on an XFS image with reflinks (df of that file system, nothing else writes
    // there) vs the blocks of the new blobs on the bench folder's file system (no reflinks)
    const xfs = await xfsAdded(base, modelMiB, o.cli);
    if (xfs === undefined) {
      console.error("  migrate on XFS with reflinks: skipped (needs root, loop devices and mkfs.xfs)");
      return;
    }
    const allowed = floor + MODELS * MiB; // a MiB per model for manifests, rollback records and XFS metadata
    o.row({
      scenario: `  disk added by that migration on XFS with reflinks vs without (floor: headers + computed tensors = ${(floor / MiB).toFixed(1)} MiB)`,
      ours: `${(xfs / MiB).toFixed(1)} MiB`,
      baseline: `${(written / MiB).toFixed(0)} MiB`,
      ratio: xfs / written,
      target: `≤ floor + 1 MiB/model`,
      pass: xfs <= allowed,
    });
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

/** Five vision models (real bytes: migrate copies them) written by `write`, each blob hard-linked into a new store; returns the blob paths. */
async function makeStore(root: string, src: string, modelMiB: number, write: (path: string, mib: number, name: string) => Promise<void> = writeShapedBlob): Promise<string[]> {
  mkdirSync(src, { recursive: true });
  const specs = [];
  for (let i = 0; i < MODELS; i++) {
    const p = join(src, `vision-${i}.gguf`);
    await write(p, modelMiB, `bench-migrate-${i}`);
    specs.push({ name: `bench/vision${i}:latest`, model: p });
  }
  const built = await buildOllamaStore(root, specs);
  rmSync(src, { recursive: true, force: true }); // the store's hard links remain
  execFileSync("sync");
  return built.map((b) => b.blob("application/vnd.ollama.image.model"));
}

/** What a migration of these blobs must write even with reflinks: per output file its header and the tensors an op computes (not a range of the source). */
async function sharedFloor(blobs: string[]): Promise<number> {
  let total = 0;
  for (const blob of blobs) {
    const views = await openViews(blob, {});
    try {
      for (const view of [views.text, views.mmproj?.kind === "view" ? views.mmproj.view : null]) {
        if (view === null) continue;
        const { layout } = view;
        total += layout.dataOffset;
        view.model.tensors.forEach((t, i) => {
          if (t.data.kind !== "range") total += Math.ceil(layout.tensorSizes[i]! / 4096) * 4096;
        });
      }
    } finally {
      await views.close();
    }
  }
  return total;
}

/** The same store built on a fresh XFS image (reflink=1), migrated: the bytes df says it added. */
async function xfsAdded(base: string, modelMiB: number, bin: string): Promise<number | undefined> {
  const img = join(base, "xfs.img");
  const mnt = join(base, "xfs");
  mkdirSync(mnt, { recursive: true });
  try {
    writeFileSync(img, "");
    // the store twice (sources, then their migration without sharing at worst), and room for XFS
    truncateSync(img, (MODELS * modelMiB * 2 + 1024) * MiB);
    execFileSync("mkfs.xfs", ["-q", "-f", "-m", "reflink=1", img], { stdio: "ignore" });
    execFileSync("mount", ["-o", "loop", img, mnt], { stdio: "ignore" });
  } catch {
    rmSync(img, { force: true });
    return undefined;
  }
  try {
    const root = join(mnt, "store");
    await makeStore(root, join(mnt, "src"), modelMiB);
    const used = () => {
      execFileSync("sync");
      return Number(execFileSync("df", ["-B1", "--output=used", mnt], { encoding: "utf8" }).trim().split("\n").pop());
    };
    const before = used();
    cli(bin, ["migrate", "--all", "--no-verify"], root);
    return used() - before;
  } finally {
    execFileSync("umount", [mnt]);
    rmSync(img, { force: true });
  }
}

function cli(bin: string, args: string[], store: string): void {
  const r = spawnSync(process.execPath, [bin, ...args], { env: { ...process.env, OLLAMA_MODELS: store }, encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`ollama-compat ${args.join(" ")} failed (${r.status}): ${r.stderr.slice(-2000)}`);
}

/** User + sys CPU time of this process's waited-for children and their waited-for descendants (/proc/self/stat cutime + cstime), in ms. */
function childCpuMs(): number {
  const stat = readFileSync("/proc/self/stat", "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // from field 3 (state) on: the name may hold spaces
  const ticks = Number(f[13]) + Number(f[14]); // fields 16 and 17
  return (ticks * 1000) / Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());
}

function timed(fn: () => void): number {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}

/** Allocated bytes of the blobs a migration added (every sha256 blob but the sources and the small ones it kept). */
function newBlobBytes(root: string, sources: string[]): number {
  const blobs = join(root, "blobs");
  let total = 0;
  for (const name of readdirSync(blobs)) {
    const p = join(blobs, name);
    if (!name.startsWith("sha256-") || sources.includes(p)) continue;
    const st = statSync(p);
    if (st.size > MiB) total += st.blocks * 512;
  }
  return total;
}

/** Back to the store as built: the manifests restored, the migrated blobs deleted. */
async function restore(root: string): Promise<void> {
  await undoMigration({ root });
  await pruneMigration({ root, graceMs: 0 });
  if (!existsSync(join(root, "blobs"))) throw new Error(`${root}: no blobs/ after restoring`);
}
