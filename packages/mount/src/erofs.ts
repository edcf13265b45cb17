// An EROFS image of planned files: the kernel's read-only file system presents them, and every
// 2 MiB chunk of a file points into a file, an extra device of the mount: a chunk that is a
// block-aligned range of a source file (the Ollama blob) into that file; every other chunk (the
// header's, a shifted tensor's edges, a computed tensor's) into the file's `whole` device, a file
// of all of its bytes at their offsets (the FUSE daemon's own file of the plan, wholeFilePlan),
// at the chunk's own offset. The image holds metadata only: it costs no copied bytes, and a
// computed tensor is computed when the kernel first reads it through the daemon, as over FUSE.
//
// Why a kernel file system: FUSE caches 4 KiB pages only, so llama-server's mmap of a mounted model
// takes 512 faults per 2 MiB where a copy on ext4 gets one PMD mapping. A file-backed EROFS mount
// (CONFIG_EROFS_FS_BACKED_BY_FILE, root; only 6.18 tested) caches large folios (order 9 with the mount's read_ahead_kb raised); measured
// on 6.18: llama-server's cold start to /health through it at 0.90-0.98x of the copy's, 2.0x through FUSE.
// It reads its devices with direct I/O (`directio`), so the bytes it reads through the FUSE file
// are cached once, in the EROFS file's pages, not in the FUSE file's too.
//
// On-disk format facts (the kernel's fs/erofs/erofs_fs.h, field names as there), as written here:
// - The superblock is 128 bytes at byte 1024 (EROFS_SUPER_OFFSET); `meta_blkaddr` 0, so an inode's
//   nid is its byte offset / 32 (EROFS_ISLOTBITS 5) from the start of the image.
// - Inodes are the 64-byte extended form (`i_format` bit 0 = 1): 64-bit size and mtime.
// - Files are EROFS_INODE_CHUNK_BASED (datalayout 4): `i_u.c.format` = EROFS_CHUNK_FORMAT_INDEXES
//   (0x20) | (chunkbits - blkszbits); the 8-byte indexes {startblk_hi, device_id, startblk_lo}
//   follow the inode, one per chunk. device_id 0 is the image, k >= 1 the k-th `device=` of the mount
//   (the superblock's device table, `extra_devices` slots of 128 bytes at `devt_slotoff` * 128).
// - Directories are EROFS_INODE_FLAT_PLAIN (datalayout 0): blocks from `i_u.startblk_lo`, each
//   block a run of 12-byte dirents {nid, nameoff, file_type, reserved} and then their names, not
//   NUL-terminated (the first dirent's nameoff / 12 is the block's count), sorted by name bytes
//   including "." and "..": lookup bisects them.
// - feature_incompat: EROFS_FEATURE_INCOMPAT_CHUNKED_FILE (0x4) | EROFS_FEATURE_INCOMPAT_DEVICE_TABLE (0x8).
import { open, stat } from "node:fs/promises";
import { writeFileAtomic } from "@compat/files";
import { MountError } from "./errors";
import type { Extent, FilePlan } from "./plan";

/** Block size: 4096 (blkszbits 12), the page size, so mapped chunks can be cached as large folios. */
export const EROFS_BLOCK = 4096;
/** Chunk size: 2 MiB, a PMD mapping; the probe measured 4 KiB chunks at 1.3-1.6x the copy's cold start. */
export const EROFS_CHUNK = 2 * 1024 * 1024;

const BLKBITS = 12;
const CHUNKBITS = 21;
const SUPER_OFFSET = 1024;
const EROFS_MAGIC = 0xe0f5e1e2;
const INCOMPAT_CHUNKED_FILE = 0x4;
const INCOMPAT_DEVICE_TABLE = 0x8;
const CHUNK_FORMAT_INDEXES = 0x20;
const LAYOUT_FLAT_PLAIN = 0;
const LAYOUT_CHUNK_BASED = 4;
const INODE_SIZE = 64;
const DIRENT_SIZE = 12;
const DEVT_SLOT = 128;
const FT_REG_FILE = 1;
const FT_DIR = 2;
/** EROFS_NAME_LEN. */
const NAME_MAX = 255;
/** `root_nid` is 16 bits, `devt_slotoff` 16 bits, `device_id` 16 bits, startblk_lo 32 bits (no 48-bit feature). */
const U16 = 0xffff;
const U32 = 0xffffffff;

/**
 * A file of the image: its path in it ("dir/name.gguf"), its plan (the mount's one description
 * of a file), and `whole`, the path of a file that holds the plan's bytes at their offsets,
 * its size a whole number of blocks (a file served from wholeFilePlan(plan)).
 */
export interface ErofsFile {
  name: string;
  plan: FilePlan;
  whole: string;
}

/** What an image is made of: the mount's `device=` list (device k is `devices[k - 1]`), and chunk counts. */
export interface ErofsImage {
  devices: string[];
  /** Chunks that point into a source (a range of the blob). */
  ranges: number;
  /** Chunks that point into their file's `whole` device. */
  whole: number;
  bytes: number;
  /** The image at the path was this one already (writeErofsImage's `reuse`), and was kept. */
  reused: boolean;
}

interface FileNode {
  kind: "file";
  plan: FilePlan;
  name: string;
  whole: string;
  /** Per chunk: its device (k >= 1) and block there, and whether that device is a source. */
  chunks: { device: number; block: number; range: boolean }[];
  nid: number;
}
interface DirNode {
  kind: "dir";
  children: Map<string, DirNode | FileNode>;
  nid: number;
  parent: number;
  block: number;
  size: number;
  data?: Uint8Array;
}

const align = (n: number, a: number) => Math.ceil(n / a) * a;

/** The devices of the planned files: each source and `whole` path once, in order of first use. */
function deviceOf(devices: Map<string, number>, path: string): number {
  let k = devices.get(path);
  if (k === undefined) {
    k = devices.size + 1;
    devices.set(path, k);
  }
  return k;
}

/** The source path, offset and size (as planned) of an extent that is a range of a source, else undefined. */
function rangeOf(plan: FilePlan, x: Extent): { path: string; offset: number; size: number } | undefined {
  if (x.kind === "source") return { path: plan.sources[x.source]!.path, offset: x.offset, size: plan.sources[x.source]!.size };
  return undefined;
}

/**
 * The plan of a file's `whole` device: its bytes, then zeros up to a whole block. The kernel
 * reads a device in whole blocks, and with `directio` a block that runs past the device's end is
 * a short read, which fails the file's read with EIO.
 */
export function wholeFilePlan(plan: FilePlan): FilePlan {
  const size = align(plan.size, EROFS_BLOCK);
  if (size === plan.size) return plan;
  return { ...plan, size, extents: [...plan.extents, { kind: "zero", at: plan.size, length: size - plan.size }] };
}

function checkPlan(file: ErofsFile): void {
  let at = 0;
  for (const x of file.plan.extents) {
    if (x.at !== at || x.length < 0) throw new MountError("BAD_PLAN", `${file.name}: an extent at ${x.at} follows one that ends at ${at}`, { file: file.name });
    at += x.length;
  }
  if (at !== file.plan.size) throw new MountError("BAD_PLAN", `${file.name}: the extents cover ${at} bytes of a ${file.plan.size}-byte file`, { file: file.name });
}

function splitName(name: string): string[] {
  const parts = name.split("/");
  for (const p of parts) {
    const n = Buffer.byteLength(p);
    if (p === "" || p === "." || p === ".." || p.includes("\0") || n > NAME_MAX) {
      throw new MountError("BAD_PLAN", `"${name}": not a file name for an EROFS image (empty, "." or "..", a NUL, or a part over ${NAME_MAX} bytes)`, { file: name });
    }
  }
  return parts;
}

/**
 * Where each chunk of a file points, one rule: into a source when it is wholly inside one range
 * of it whose source offset is a block boundary and whose last block is whole in the source
 * (the kernel reads a chunk's tail, a file's last chunk, in whole blocks; with `directio` a
 * block past the source's end is a short read, and the file's read fails with EIO); else into
 * the file's `whole` device at the chunk's own offset.
 */
function chunksOf(file: ErofsFile, devices: Map<string, number>): FileNode["chunks"] {
  const { plan } = file;
  const chunks: FileNode["chunks"] = [];
  let i = 0;
  for (let lo = 0; lo < plan.size; lo += EROFS_CHUNK) {
    const hi = Math.min(plan.size, lo + EROFS_CHUNK);
    while (plan.extents[i]!.at + plan.extents[i]!.length <= lo) i++;
    const x = plan.extents[i]!;
    const r = rangeOf(plan, x);
    // the chunk's file offset is a multiple of the block, so the device offset must be one too
    const off = r === undefined ? 0 : r.offset + (lo - x.at);
    const range = r !== undefined && x.at + x.length >= hi && off % EROFS_BLOCK === 0 && off + align(hi - lo, EROFS_BLOCK) <= r.size;
    const [path, at] = range ? [r.path, off] : [file.whole, lo];
    const block = at / EROFS_BLOCK;
    if (block > U32) throw new MountError("EROFS_UNSUPPORTED", `${file.name}: a chunk at ${lo} reads ${path} at ${at}, past the 16 TiB a 32-bit block address reaches`, { file: file.name, source: path });
    chunks.push({ device: deviceOf(devices, path), block, range });
  }
  return chunks;
}

/** A directory's blocks: dirents sorted by name bytes, as many per block as fit. */
function dirBlocks(entries: { name: Buffer; nid: number; type: number }[]): { data: Uint8Array; size: number } {
  entries.sort((a, b) => Buffer.compare(a.name, b.name));
  const blocks: Buffer[] = [];
  let size = 0;
  for (let i = 0; i < entries.length; ) {
    let n = 0;
    let used = 0;
    while (i + n < entries.length && used + DIRENT_SIZE + entries[i + n]!.name.length <= EROFS_BLOCK) used += DIRENT_SIZE + entries[i + n++]!.name.length;
    const b = Buffer.alloc(EROFS_BLOCK);
    let nameoff = n * DIRENT_SIZE;
    for (let j = 0; j < n; j++) {
      const e = entries[i + j]!;
      b.writeBigUInt64LE(BigInt(e.nid), j * DIRENT_SIZE);
      b.writeUInt16LE(nameoff, j * DIRENT_SIZE + 8);
      b.writeUInt8(e.type, j * DIRENT_SIZE + 10);
      e.name.copy(b, nameoff);
      nameoff += e.name.length;
    }
    // i_size ends the last block at its last name (readdir takes the last name's length from it)
    size = blocks.length * EROFS_BLOCK + nameoff;
    blocks.push(b);
    i += n;
  }
  return { data: Buffer.concat(blocks), size };
}

function writeInode(buf: Buffer, at: number, o: { layout: number; mode: number; size: number; u: number; ino: number; nlink: number; mtimeNs: bigint }): void {
  buf.writeUInt16LE(1 | (o.layout << 1), at); // i_format: extended, datalayout
  buf.writeUInt16LE(0, at + 2); // i_xattr_icount
  buf.writeUInt16LE(o.mode, at + 4); // i_mode
  buf.writeBigUInt64LE(BigInt(o.size), at + 8); // i_size
  buf.writeUInt32LE(o.u, at + 16); // i_u: startblk_lo, or the chunk format
  buf.writeUInt32LE(o.ino, at + 20); // i_ino
  // i_uid, i_gid 0 (root)
  buf.writeBigUInt64LE(o.mtimeNs / 1_000_000_000n, at + 32); // i_mtime
  buf.writeUInt32LE(Number(o.mtimeNs % 1_000_000_000n), at + 40); // i_mtime_nsec
  buf.writeUInt32LE(o.nlink, at + 44); // i_nlink
}

/**
 * How many chunks of `files` an image would point into sources, and how many into their
 * `whole` devices, without reading or writing anything: a file mostly read through its whole
 * device (the FUSE daemon's file) is no better served by EROFS than by that file itself.
 */
export function erofsChunks(files: Array<Omit<ErofsFile, "whole">>): { ranges: number; whole: number } {
  const devices = new Map<string, number>();
  let ranges = 0;
  let whole = 0;
  for (const f of files) {
    checkPlan({ ...f, whole: "" });
    for (const c of chunksOf({ ...f, whole: "" }, devices)) c.range ? ranges++ : whole++;
  }
  return { ranges, whole };
}

/**
 * Writes an EROFS image of `files` to `path` atomically: metadata only. Mount it with the
 * returned `devices` as its `device=` options, in order (mountErofs), right away: each source is
 * checked here to be the file that was planned (REJECTED if not), each `whole` file to hold the
 * plan's blocks (BAD_PLAN if not). With `reuse`, an image already at `path` whose bytes are the
 * ones this would write is kept (a restart mounts the same image again).
 */
export async function writeErofsImage(path: string, files: ErofsFile[], opts: { reuse?: boolean } = {}): Promise<ErofsImage> {
  const devices = new Map<string, number>();
  const root: DirNode = { kind: "dir", children: new Map(), nid: 0, parent: 0, block: 0, size: 0 };
  const dirs: DirNode[] = [root];
  const fileNodes: FileNode[] = [];
  for (const f of files) {
    checkPlan(f);
    const parts = splitName(f.name);
    let dir = root;
    for (const p of parts.slice(0, -1)) {
      let next = dir.children.get(p);
      if (next === undefined) {
        next = { kind: "dir", children: new Map(), nid: 0, parent: 0, block: 0, size: 0 };
        dir.children.set(p, next);
        dirs.push(next);
      }
      if (next.kind !== "dir") throw new MountError("BAD_PLAN", `"${f.name}": "${p}" is a file of the image, not a folder`, { file: f.name });
      dir = next;
    }
    const leaf = parts[parts.length - 1]!;
    if (dir.children.has(leaf)) throw new MountError("BAD_PLAN", `"${f.name}" is in the image twice`, { file: f.name });
    const node: FileNode = { kind: "file", plan: f.plan, name: f.name, whole: f.whole, chunks: chunksOf(f, devices), nid: 0 };
    dir.children.set(leaf, node);
    fileNodes.push(node);
  }
  if (devices.size > U16) throw new MountError("EROFS_UNSUPPORTED", `the files read ${devices.size} files; an EROFS image can name ${U16} devices`);
  await checkDevices(fileNodes, devices);

  // Metadata: the root's inode first (root_nid is 16 bits), the device table, the other inodes.
  let at = SUPER_OFFSET + 128;
  root.nid = at / 32;
  at += INODE_SIZE;
  const devtAt = align(at, DEVT_SLOT);
  at = devtAt + devices.size * DEVT_SLOT;
  if (devtAt / DEVT_SLOT > U16) throw new MountError("EROFS_UNSUPPORTED", "the device table starts past what devt_slotoff reaches");
  for (const d of dirs.slice(1)) {
    at = align(at, 32);
    d.nid = at / 32;
    at += INODE_SIZE;
  }
  for (const f of fileNodes) {
    at = align(at, 32);
    f.nid = at / 32;
    at += INODE_SIZE + 8 * f.chunks.length; // indexes follow the inode, 8-byte aligned as it is
  }
  let block = Math.ceil(at / EROFS_BLOCK);
  // Directory blocks: the last of the image.
  for (const d of dirs) {
    for (const c of d.children.values()) if (c.kind === "dir") c.parent = d.nid;
    const entries = [
      { name: Buffer.from("."), nid: d.nid, type: FT_DIR },
      { name: Buffer.from(".."), nid: d === root ? root.nid : d.parent, type: FT_DIR },
      ...[...d.children].map(([n, c]) => ({ name: Buffer.from(n), nid: c.nid, type: c.kind === "dir" ? FT_DIR : FT_REG_FILE })),
    ];
    const { data, size } = dirBlocks(entries);
    d.data = data;
    d.size = size;
    d.block = block;
    block += data.length / EROFS_BLOCK;
  }
  if (block > U32) throw new MountError("EROFS_UNSUPPORTED", `the image would have ${block} blocks; 32-bit block addresses reach ${U32}`);
  const ranges = fileNodes.reduce((n, f) => n + f.chunks.filter((c) => c.range).length, 0);
  const whole = fileNodes.reduce((n, f) => n + f.chunks.length, 0) - ranges;

  const meta = Buffer.alloc(dirs[0]!.block * EROFS_BLOCK);
  // superblock (struct erofs_super_block)
  meta.writeUInt32LE(EROFS_MAGIC, SUPER_OFFSET); // magic; checksum and feature_compat 0 (no EROFS_FEATURE_COMPAT_SB_CHKSUM)
  meta.writeUInt8(BLKBITS, SUPER_OFFSET + 12); // blkszbits
  meta.writeUInt16LE(root.nid, SUPER_OFFSET + 14); // root_nid
  meta.writeBigUInt64LE(BigInt(dirs.length + fileNodes.length), SUPER_OFFSET + 16); // inos
  meta.writeUInt32LE(block, SUPER_OFFSET + 36); // blocks; meta_blkaddr and xattr_blkaddr 0
  meta.write("ollama-compat", SUPER_OFFSET + 64); // volume_name
  meta.writeUInt32LE(INCOMPAT_CHUNKED_FILE | INCOMPAT_DEVICE_TABLE, SUPER_OFFSET + 80); // feature_incompat
  meta.writeUInt16LE(devices.size, SUPER_OFFSET + 86); // extra_devices
  meta.writeUInt16LE(devtAt / DEVT_SLOT, SUPER_OFFSET + 88); // devt_slotoff
  meta.writeUInt8(0, SUPER_OFFSET + 90); // dirblkbits: directory blocks are fs blocks
  // device table (struct erofs_deviceslot): blocks_lo, the blocks the image reads of it
  const used = new Map<string, number>();
  for (const f of fileNodes) {
    used.set(f.whole, Math.max(used.get(f.whole) ?? 0, f.plan.size));
    for (const x of f.plan.extents) {
      const r = rangeOf(f.plan, x);
      if (r !== undefined) used.set(r.path, Math.max(used.get(r.path) ?? 0, r.offset + x.length));
    }
  }
  for (const [p, k] of devices) meta.writeUInt32LE(Math.ceil((used.get(p) ?? 0) / EROFS_BLOCK), devtAt + (k - 1) * DEVT_SLOT + 64);
  const newest = fileNodes.reduce((m, f) => (f.plan.mtimeNs > m ? f.plan.mtimeNs : m), 0n);
  let ino = 1;
  for (const d of dirs) {
    const subdirs = [...d.children.values()].filter((c) => c.kind === "dir").length;
    writeInode(meta, d.nid * 32, { layout: LAYOUT_FLAT_PLAIN, mode: 0o40555, size: d.size, u: d.block, ino: ino++, nlink: 2 + subdirs, mtimeNs: newest });
  }
  for (const f of fileNodes) {
    const fmt = CHUNK_FORMAT_INDEXES | (CHUNKBITS - BLKBITS);
    writeInode(meta, f.nid * 32, { layout: LAYOUT_CHUNK_BASED, mode: 0o100444, size: f.plan.size, u: fmt, ino: ino++, nlink: 1, mtimeNs: f.plan.mtimeNs });
    const idx = f.nid * 32 + INODE_SIZE;
    for (const [i, c] of f.chunks.entries()) {
      // struct erofs_inode_chunk_index: startblk_hi 0, device_id, startblk_lo
      meta.writeUInt16LE(c.device, idx + 8 * i + 2);
      meta.writeUInt32LE(c.block, idx + 8 * i + 4);
    }
  }

  const bytes = block * EROFS_BLOCK;
  const image = Buffer.concat([meta, ...dirs.map((d) => d.data!)]);
  if (opts.reuse && (await sameImage(path, image))) return { devices: [...devices.keys()], ranges, whole, bytes, reused: true };
  const written = await writeFileAtomic(path, async (out) => {
    await out.write(image);
  });
  return { devices: [...devices.keys()], ranges, whole, bytes: written, reused: false };
}

/**
 * Each device is still the file that was planned: a source by (dev, inode, size, mtime) as
 * planView saw it, a `whole` file at least as long as the plan's blocks. The kernel opens the
 * devices by path when the image is mounted and keeps them open; a blob replaced (renamed over)
 * later does not change what the mount reads, but one replaced between planning and mounting would.
 */
async function checkDevices(files: FileNode[], devices: Map<string, number>): Promise<void> {
  const checked = new Set<string>();
  for (const f of files) {
    for (const src of f.plan.sources) {
      if (!devices.has(src.path) || checked.has(src.path)) continue;
      checked.add(src.path);
      const st = await stat(src.path, { bigint: true }).catch(() => undefined);
      if (st === undefined || st.dev !== src.dev || st.ino !== src.ino || Number(st.size) !== src.size || st.mtimeNs !== src.mtimeNs) {
        throw new MountError("REJECTED", `${f.name}: ${src.path} is not the file that was planned any more (${st === undefined ? "gone" : "another inode, size or mtime"})`, { file: f.name, source: src.path });
      }
    }
    if (!devices.has(f.whole)) continue; // every chunk a range of a source
    const st = await stat(f.whole).catch(() => undefined);
    const want = align(f.plan.size, EROFS_BLOCK);
    if (st === undefined || st.size < want) {
      throw new MountError("BAD_PLAN", `${f.name}: ${f.whole} ${st === undefined ? "is missing" : `holds ${st.size} bytes`}: the image reads ${want} (the file's bytes to a whole block) of it`, { file: f.name, source: f.whole });
    }
  }
}

/** Whether the file at `path` is `image`, byte for byte. */
async function sameImage(path: string, image: Buffer): Promise<boolean> {
  const st = await stat(path).catch(() => undefined);
  if (st === undefined || st.size !== image.length) return false;
  const h = await open(path, "r");
  try {
    const head = Buffer.alloc(image.length);
    const { bytesRead } = await h.read(head, 0, head.length, 0);
    return bytesRead === head.length && head.equals(image);
  } finally {
    await h.close();
  }
}
