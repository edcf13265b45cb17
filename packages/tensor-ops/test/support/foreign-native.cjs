// Runs under a Node of another platform (linux-arm64 under qemu-user, win32-x64 under Wine), with
// PREBUILDS_ONLY=1 so node-gyp-build ignores this machine's build/Release: loads the package as
// built here (dist/index.cjs finds its addon in prebuilds/ by itself), converts the inputs in
// <dir>/cases.json + cases.bin with each instruction set, and writes <dir>/out.json + out.bin;
// resamples the grid in <dir>/grid.json + grid.bin into <dir>/grid-out.bin.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const dir = process.argv[2];
const ops = require("../../dist/index.cjs");
// The same file the package loaded (require caches .node modules by path): used only for setIsa.
const addon = require("node-gyp-build")(path.join(__dirname, "../.."));
const cases = JSON.parse(fs.readFileSync(path.join(dir, "cases.json"), "utf8"));
const input = fs.readFileSync(path.join(dir, "cases.bin"));

const info = ops.backendInfo();
const isas = [];
const chunks = [];
for (const want of ["auto", "scalar"]) {
  isas.push(addon.setIsa(want));
  for (const c of cases) {
    const bytes = new Uint8Array(input.buffer, input.byteOffset + c.offset, c.length);
    const out = ops.toF32(c.type, bytes, c.nElements);
    chunks.push(Buffer.from(out.buffer, out.byteOffset, out.byteLength));
  }
}
addon.setIsa("auto");
fs.writeFileSync(path.join(dir, "out.bin"), Buffer.concat(chunks));
// The position-grid resample, through the package as a user calls it (the addon's kernel).
const gridSpec = JSON.parse(fs.readFileSync(path.join(dir, "grid.json"), "utf8"));
const gridBytes = fs.readFileSync(path.join(dir, "grid.bin"));
const grid = new Float32Array(gridBytes.buffer.slice(gridBytes.byteOffset, gridBytes.byteOffset + gridBytes.byteLength));
const resampled = ops.resamplePositionGrid(grid, gridSpec);
fs.writeFileSync(path.join(dir, "grid-out.bin"), Buffer.from(resampled.buffer, resampled.byteOffset, resampled.byteLength));
fs.writeFileSync(
  path.join(dir, "out.json"),
  JSON.stringify({ platform: process.platform, arch: process.arch, backend: info.backend, nativeTypes: info.nativeTypes, isas, addon: require("node-gyp-build").resolve(path.join(__dirname, "../..")) }),
);
