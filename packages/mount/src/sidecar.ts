import { createHash, randomBytes } from "node:crypto";
import { mkdir, open, readdir, rename, rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { processAlive } from "@compat/files";
import type { GgufTensor } from "@compat/gguf";
import { MountError } from "./errors";
import type { ComputedPart } from "./plan";

/**
 * Content-addressed files of computed tensor bytes: the name is a hash of what the bytes are
 * made from (the caller's key for the file: source digest, translator version, profile, view)
 * and of the tensor (index, name, type, shape, op), so an entry is written once and stays
 * valid for every mount of the same translation.
 */
export class SidecarStore {
  constructor(readonly dir: string) {}

  /** The sidecar of tensor `index` of the file whose content key is `fileKey`. */
  pathFor(fileKey: string, tensor: GgufTensor, index: number): string {
    const label = tensor.data.kind === "computed" ? tensor.data.label : tensor.data.kind;
    const id = JSON.stringify({ v: 1, file: fileKey, index, name: tensor.name, type: tensor.type, shape: tensor.shape, op: label });
    const hex = createHash("sha256").update(id).digest("hex");
    return join(this.dir, hex.slice(0, 2), `${hex.slice(2, 40)}.bin`);
  }

  /** Removes the temp files of writers that died before their rename (`<name>.<pid>.<random>.tmp`). */
  async sweep(): Promise<void> {
    for (const sub of await readdir(this.dir).catch(() => [] as string[])) {
      for (const name of await readdir(join(this.dir, sub)).catch(() => [] as string[])) {
        const m = /\.(\d+)\.[0-9a-f]{8}\.tmp$/.exec(name);
        if (m && !processAlive(Number(m[1]))) await rm(join(this.dir, sub, name), { force: true });
      }
    }
  }

  /** Whether the sidecar is there with its full length. */
  async has(part: ComputedPart): Promise<boolean> {
    return (await stat(part.path).catch(() => undefined))?.size === part.length;
  }

  /**
   * Computes and writes one sidecar: a temp file beside it, fsynced, then renamed into place,
   * so a reader (the daemon) never sees part of one. Concurrent writers of the same sidecar
   * write the same bytes; the last rename wins.
   */
  async write(part: ComputedPart): Promise<void> {
    if (await this.has(part)) return;
    const bytes = await part.produce();
    if (bytes.length !== part.length) throw new MountError("BAD_SIDECAR", `${part.label}: produced ${bytes.length} bytes, expected ${part.length}`, { path: part.path });
    await mkdir(dirname(part.path), { recursive: true });
    const tmp = `${part.path}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
    const fh = await open(tmp, "wx", 0o644);
    try {
      let done = 0;
      while (done < bytes.length) done += (await fh.write(bytes, done, bytes.length - done)).bytesWritten;
      await fh.sync();
    } catch (e) {
      await fh.close().catch(() => undefined);
      await rm(tmp, { force: true });
      throw e;
    }
    await fh.close();
    await rename(tmp, part.path);
  }
}
