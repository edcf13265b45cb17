// The one native-build runner: what each flag does with a package's target (build, warn or fail,
// skip when an installed copy runs, place the prebuild atomically), whatever the target compiles.
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { runNativeBuild, type NativeTarget } from "@compat/files";

const root = mkdtempSync(join(tmpdir(), "files-native-build-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
afterEach(() => vi.restoreAllMocks());

let n = 0;
/** A target whose compile writes an executable into the package's build/ and counts its calls. */
function target(over: Partial<NativeTarget> & { fails?: string } = {}): NativeTarget & { compiled: number; pkgDir: string } {
  const pkgDir = join(root, `pkg-${n++}`);
  mkdirSync(join(pkgDir, "build"), { recursive: true });
  const t = {
    label: "demo",
    what: "demo-daemon",
    pkgDir,
    compiled: 0,
    installed: () => "no prebuilt demo-daemon runs here" as true | string,
    compile() {
      t.compiled++;
      if (over.fails !== undefined) return { failed: over.fails };
      const file = join(pkgDir, "build", "demo-daemon");
      writeFileSync(file, `#!/bin/sh\necho built ${t.compiled}\n`);
      chmodSync(file, 0o755);
      return { file, note: "static" };
    },
    prebuild: { file: "demo-daemon" },
    without: "the demo runs without it",
    ...over,
  };
  return t;
}

function quiet() {
  return { log: vi.spyOn(console, "log").mockImplementation(() => {}), warn: vi.spyOn(console, "warn").mockImplementation(() => {}), error: vi.spyOn(console, "error").mockImplementation(() => {}) };
}

describe("runNativeBuild", () => {
  it("--prebuild places the built file as this platform's prebuild, executable, with no temp file left, and removes the names it replaces", async () => {
    const t = target({ prebuild: { file: "demo-daemon", replaces: ["old-name"] } });
    const dir = join(t.pkgDir, "prebuilds", `${process.platform}-${process.arch}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "old-name"), "stale");
    writeFileSync(join(dir, "demo-daemon"), "the previous build");
    const out = quiet();
    expect(await runNativeBuild(t, ["--prebuild"])).toBe(0);
    expect(readFileSync(join(dir, "demo-daemon"), "utf8")).toBe(readFileSync(join(t.pkgDir, "build", "demo-daemon"), "utf8"));
    expect(statSync(join(dir, "demo-daemon")).mode & 0o777).toBe(0o755);
    expect(readdirSync(dir)).toEqual(["demo-daemon"]);
    expect(out.log).toHaveBeenCalledWith(`demo: demo-daemon built (build/demo-daemon, prebuilds/${process.platform}-${process.arch}/demo-daemon; static)`);
  });

  it("a failed build fails the bin (exit 1) and only warns with --optional or --if-needed, naming why and what the user has without it", async () => {
    for (const [flags, code] of [[[], 1], [["--optional"], 0], [["--if-needed"], 0]] as const) {
      const t = target({ fails: "no compiler" });
      const out = quiet();
      expect(await runNativeBuild(t, flags)).toBe(code);
      const said = (code === 1 ? out.error : out.warn).mock.calls.flat().join("\n");
      expect(said).toBe("demo: cannot build demo-daemon (no compiler); the demo runs without it");
      vi.restoreAllMocks();
    }
  });

  it("--if-needed builds only when nothing installed runs here, or when npm was asked to build from source", async () => {
    const runs = target({ installed: () => true });
    quiet();
    expect(await runNativeBuild(runs, ["--if-needed"])).toBe(0);
    expect(runs.compiled).toBe(0);

    const missing = target();
    const out = quiet();
    expect(await runNativeBuild(missing, ["--if-needed"])).toBe(0);
    expect(missing.compiled).toBe(1);
    expect(out.log).toHaveBeenCalledWith("demo: no prebuilt demo-daemon runs here; building demo-daemon from source");

    const forced = target({ installed: () => true });
    vi.stubEnv("npm_config_build_from_source", "true");
    try {
      expect(await runNativeBuild(forced, ["--if-needed"])).toBe(0);
    } finally {
      vi.unstubAllEnvs();
    }
    expect(forced.compiled).toBe(1);
  });

  it("a skipped or unsupported target compiles nothing: skipped is never an error, unsupported fails only the bin", async () => {
    const skipped = target({ skipped: "DEMO=off" });
    const out = quiet();
    expect(await runNativeBuild(skipped, [])).toBe(0);
    expect(out.log).toHaveBeenCalledWith("demo: DEMO=off, skipping the native build");
    for (const [flags, code] of [[[], 1], [["--optional"], 0], [["--if-needed"], 0]] as const) {
      const t = target({ unsupported: "Linux-only" });
      expect(await runNativeBuild(t, flags)).toBe(code);
      expect(t.compiled).toBe(0);
    }
    expect(skipped.compiled).toBe(0);
  });
});
