/**
 * Chunked conversion: turns a stream of raw tensor bytes (any chunk sizes) into f32 chunks that
 * always end on a block boundary, holding at most one output chunk plus one partial block.
 */
import { BlockAlignmentError, ByteLengthError, ArgumentError } from "./errors";
import { toF32Into, validateToF32 } from "./convert";
import { typeInfo } from "./types";

export interface ConvertStreamOptions {
  /** Elements in the whole tensor. When given, the total is checked before anything past it is converted. */
  nElements?: number;
  /** Target output chunk size in elements (rounded down to whole blocks, at least one block). Default 1 Mi. */
  chunkElements?: number;
  /**
   * Reuse one output buffer for every chunk (no allocation per chunk). The consumer must finish with
   * a chunk before asking for the next one. Default false.
   */
  reuseOutput?: boolean;
}

/** Raw tensor bytes in chunks of any size, in order. */
export type ChunkSource = AsyncIterable<Uint8Array> | Iterable<Uint8Array>;

/**
 * Converts tensor bytes of ggml `type` chunk by chunk. Yields Float32Array chunks of whole blocks.
 * Throws a typed error as soon as the input is known to be malformed (too many bytes, a trailing
 * partial block, or fewer bytes than `nElements` requires).
 */
export async function* convertStream(
  type: number,
  source: ChunkSource,
  options: ConvertStreamOptions = {},
): AsyncGenerator<Float32Array, void, undefined> {
  const layout = typeInfo(type);
  validateToF32(type, 0, 0); // rejects unknown and unsupported types up front
  const expectedElements = options.nElements;
  if (expectedElements !== undefined) {
    if (!Number.isSafeInteger(expectedElements) || expectedElements < 0) throw new ArgumentError("nElements must be a non-negative integer");
    if (expectedElements % layout.blockSize !== 0) throw new BlockAlignmentError(layout.name, expectedElements, layout.blockSize);
  }
  const expectedBytes = expectedElements === undefined ? undefined : (expectedElements / layout.blockSize) * layout.typeSize;
  const blocksPerChunk = Math.max(1, Math.floor((options.chunkElements ?? 1 << 20) / layout.blockSize));
  const chunkBytes = blocksPerChunk * layout.typeSize;

  const pending = new Uint8Array(chunkBytes);
  let pendingLength = 0;
  let totalBytes = 0;
  let shared: Float32Array | undefined;

  const emit = (bytes: Uint8Array): Float32Array => {
    const nElements = (bytes.byteLength / layout.typeSize) * layout.blockSize;
    let out: Float32Array;
    if (options.reuseOutput) {
      shared ??= new Float32Array(blocksPerChunk * layout.blockSize);
      out = shared.subarray(0, nElements);
    } else {
      out = new Float32Array(nElements);
    }
    return toF32Into(type, bytes, out, nElements);
  };

  for await (const piece of source) {
    totalBytes += piece.byteLength;
    if (expectedBytes !== undefined && totalBytes > expectedBytes) {
      throw new ByteLengthError(`${layout.name} stream of ${String(expectedElements)} elements`, expectedBytes, totalBytes);
    }
    let offset = 0;
    // Top up a partially filled chunk first.
    if (pendingLength > 0) {
      const take = Math.min(chunkBytes - pendingLength, piece.byteLength);
      pending.set(piece.subarray(0, take), pendingLength);
      pendingLength += take;
      offset = take;
      if (pendingLength === chunkBytes) {
        yield emit(pending);
        pendingLength = 0;
      }
    }
    // Whole chunks straight from the input, without copying.
    while (piece.byteLength - offset >= chunkBytes) {
      yield emit(piece.subarray(offset, offset + chunkBytes));
      offset += chunkBytes;
    }
    // Whole blocks of the remainder go out now only if nothing is buffered; keep the tail.
    const rest = piece.byteLength - offset;
    if (rest > 0) {
      pending.set(piece.subarray(offset), pendingLength);
      pendingLength += rest;
    }
  }
  if (expectedBytes !== undefined && totalBytes !== expectedBytes) {
    throw new ByteLengthError(`${layout.name} stream of ${String(expectedElements)} elements`, expectedBytes, totalBytes);
  }
  if (pendingLength % layout.typeSize !== 0) {
    throw new ByteLengthError(`${layout.name} stream must end on a block boundary`, totalBytes - (pendingLength % layout.typeSize), totalBytes);
  }
  if (pendingLength > 0) yield emit(pending.subarray(0, pendingLength));
}
