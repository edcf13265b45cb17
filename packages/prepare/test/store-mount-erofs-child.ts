// Run by store-mount-erofs.test.ts in a process of its own, which the test kills with SIGKILL
// once it has mounted: prints where the store's translated model links to (its EROFS mount's
// file), then waits to be killed.
import { readlink } from "node:fs/promises";
import { join } from "node:path";
import { StoreMount } from "@compat/prepare";

const [root, dir] = process.argv.slice(2) as [string, string];
const mount = await StoreMount.open({ dir: join(dir, "mnt"), sidecarDir: join(dir, "sidecars"), store: root, rescanMs: 0 });
process.stdout.write(JSON.stringify({ target: await readlink(mount.models()[0]!.prepared.modelPath) }) + "\n");
setInterval(() => undefined, 60_000);
