import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { TestkitError } from "./errors";
import { testkitRoot } from "./package-root";

/**
 * The one CPU baseline every llama.cpp of the test suite runs on, whatever the host: the
 * tools built by scripts/build-llama-tools.sh (GGML_NATIVE off, these features on, no
 * AVX-512, no AMX) and node-llama-cpp's prebuilt, pinned to its CPU variant of the same
 * feature set. Left to choose, ggml loads the best variant for the host, and on an Intel
 * host with AMX that one puts quantized weights in the AMX buffer type (llama-server
 * crashed at warm-up, tiny models generated only token 0, the scheduler asserted): a
 * test's verdict then depended on the CPU it ran on.
 */
export const CPU_BASELINE = {
  name: "x86-64-v3",
  /** /proc/cpuinfo flags the baseline needs. */
  cpuFlags: ["avx2", "fma", "f16c", "bmi2"],
  /** node-llama-cpp's libggml-cpu-<variant>.so built for the same features (SSE4.2 AVX F16C FMA AVX2 BMI2). */
  nodeLlamaCppVariant: "haswell",
} as const;

const MARKER = ".ollama-compat-cpu-variant";

/**
 * Makes node-llama-cpp load the baseline's CPU variant, and no other: it looks for
 * prebuilt binaries in its own `bins/<platform>-<arch>/` before the platform package, and
 * ggml loads the best-scoring `libggml-cpu-*.so` of that folder. So that folder becomes a
 * copy of the platform package's binaries with only the baseline's variant in it (28 MB,
 * made once per install, atomically: concurrent test workers agree on the result).
 * Returns the file ggml must load, or undefined where there is nothing to choose (no
 * x86-64 Linux prebuilt with CPU variants).
 */
export function pinNodeLlamaCppCpuVariant(): string | undefined {
  if (process.platform !== "linux" || process.arch !== "x64") return undefined;
  const require = createRequire(join(testkitRoot(), "package.json"));
  const nodeLlamaCpp = join(dirname(require.resolve("node-llama-cpp")), "..");
  let platformEntry: string;
  try {
    platformEntry = createRequire(join(nodeLlamaCpp, "package.json")).resolve("@node-llama-cpp/linux-x64");
  } catch {
    return undefined;
  }
  const folder = "linux-x64";
  const from = join(dirname(platformEntry), "..", "bins", folder);
  const variantFile = `libggml-cpu-${CPU_BASELINE.nodeLlamaCppVariant}.so`;
  if (!existsSync(join(from, variantFile))) {
    throw new TestkitError("CPU_BASELINE_UNSUPPORTED", `node-llama-cpp's prebuilt has no ${variantFile} in ${from}: cannot pin the ${CPU_BASELINE.name} baseline`);
  }
  const to = join(nodeLlamaCpp, "bins", folder);
  const version = (JSON.parse(readFileSync(join(dirname(platformEntry), "..", "package.json"), "utf8")) as { version: string }).version;
  const stamp = `${CPU_BASELINE.nodeLlamaCppVariant} ${version}\n`;
  const pinned = join(to, variantFile);
  if (readMarker(to) === stamp) return pinned;

  assertHostHasBaseline();
  const staging = `${to}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  mkdirSync(staging, { recursive: true });
  try {
    for (const name of readdirSync(from)) {
      if (name.startsWith("libggml-cpu-") && name !== variantFile) continue;
      copyFileSync(join(from, name), join(staging, name));
    }
    writeFileSync(join(staging, MARKER), stamp);
    if (existsSync(to)) {
      const old = `${to}.old-${process.pid}-${Math.random().toString(36).slice(2)}`;
      try {
        renameSync(to, old);
        rmSync(old, { recursive: true, force: true });
      } catch {
        // another worker moved it first
      }
    }
    try {
      renameSync(staging, to);
    } catch (e) {
      // another worker put its copy in place first: fine if it is the same pin
      if (readMarker(to) !== stamp) throw e;
    }
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return pinned;
}

function readMarker(dir: string): string | undefined {
  try {
    return readFileSync(join(dir, MARKER), "utf8");
  } catch {
    return undefined;
  }
}

/** A host without the baseline's features cannot run the pinned variant: say so instead of failing later. */
function assertHostHasBaseline(): void {
  let cpuinfo: string;
  try {
    cpuinfo = readFileSync("/proc/cpuinfo", "utf8");
  } catch {
    return;
  }
  const flags = new Set((/^flags\s*:(.*)$/m.exec(cpuinfo)?.[1] ?? "").trim().split(/\s+/));
  const missing = CPU_BASELINE.cpuFlags.filter((f) => !flags.has(f));
  if (missing.length > 0) {
    throw new TestkitError("CPU_BASELINE_UNSUPPORTED", `this CPU lacks ${missing.join(", ")}, which the ${CPU_BASELINE.name} baseline of the test suite needs`);
  }
}
