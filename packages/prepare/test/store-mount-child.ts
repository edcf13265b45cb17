// Run by store-mount-ops.test.ts in a process of its own (the test runner's has loaded the ops'
// native code long before): mounts a store and prints whether that code was mapped before the
// mount and once it is mounted, before any file of it is read.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { StoreMount } from "@compat/prepare";

/** @compat/tensor-ops' addon, as a local build (build/Release) or a prebuild (prebuilds/). */
const opsMapped = () => /tensor-ops\/.*\.node$/m.test(readFileSync("/proc/self/maps", "utf8"));

const [root, dir] = process.argv.slice(2) as [string, string];
const before = opsMapped();
const mount = await StoreMount.open({ dir: join(dir, "mnt"), sidecarDir: join(dir, "sidecars"), store: root, rescanMs: 0 });
// the load is queued for the next turn of the event loop, ahead of this one
await new Promise((done) => setImmediate(done));
const mounted = opsMapped();
const files = mount.models().map((m) => m.name);
await mount.close();
process.stdout.write(JSON.stringify({ before, mounted, files }) + "\n");
