// fast-check arbitraries for GGUF models; shared with other packages' tests (testkit).
import fc from "fast-check";
import {
  GgufModel,
  GgufValueType,
  allGgmlTypes,
  ggmlTypeInfo,
  ggufArray,
  tensorByteSize,
  type GgufArray,
  type GgufTensor,
  type GgufValue,
} from "@compat/gguf";

const text = (maxLength = 12) => fc.string({ unit: "grapheme", maxLength });

const scalarByType: Record<number, fc.Arbitrary<GgufValue>> = {
  [GgufValueType.UINT8]: fc.integer({ min: 0, max: 0xff }),
  [GgufValueType.INT8]: fc.integer({ min: -0x80, max: 0x7f }),
  [GgufValueType.UINT16]: fc.integer({ min: 0, max: 0xffff }),
  [GgufValueType.INT16]: fc.integer({ min: -0x8000, max: 0x7fff }),
  [GgufValueType.UINT32]: fc.integer({ min: 0, max: 0xffffffff }),
  [GgufValueType.INT32]: fc.integer({ min: -0x80000000, max: 0x7fffffff }),
  [GgufValueType.FLOAT32]: fc.float(),
  [GgufValueType.FLOAT64]: fc.double(),
  [GgufValueType.BOOL]: fc.boolean(),
  [GgufValueType.STRING]: text(),
  [GgufValueType.UINT64]: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  [GgufValueType.INT64]: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
};

const SCALAR_TYPES = Object.keys(scalarByType).map(Number) as GgufValueType[];

/** An array of any item type; nested arrays go at most `depth` levels down. */
export function arbitraryArray(depth = 2): fc.Arbitrary<GgufArray> {
  const itemTypes = depth > 0 ? [...SCALAR_TYPES, GgufValueType.ARRAY] : SCALAR_TYPES;
  return fc.constantFrom(...itemTypes).chain((itemType) => {
    const item: fc.Arbitrary<unknown> = itemType === GgufValueType.ARRAY ? arbitraryArray(depth - 1) : scalarByType[itemType]!;
    return fc.array(item, { maxLength: 5 }).map((items) => ggufArray(itemType, items as never));
  });
}

export interface ArbitraryKv {
  key: string;
  type: GgufValueType;
  value: GgufValue;
}

/** A metadata entry of any of the 13 value types. */
export function arbitraryKv(): fc.Arbitrary<ArbitraryKv> {
  const value = fc.oneof(
    fc.constantFrom(...SCALAR_TYPES).chain((type) => scalarByType[type]!.map((value) => ({ type, value }))),
    arbitraryArray().map((value) => ({ type: GgufValueType.ARRAY, value: value as GgufValue })),
  );
  // "general.alignment" is reserved for the alignment option.
  const key = text(16).filter((k) => k.length > 0 && k !== "general.alignment");
  return fc.record({ key, kv: value }).map(({ key, kv }) => ({ key, ...kv }));
}

/** A tensor of any ggml type with a small valid shape and random bytes. */
export function arbitraryTensor(name: fc.Arbitrary<string> = text(20)): fc.Arbitrary<GgufTensor> {
  return fc
    .record({
      name,
      type: fc.constantFrom(...allGgmlTypes()),
      blocks: fc.integer({ min: 0, max: 2 }),
      rest: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 3 }),
      seed: fc.integer(),
    })
    .map(({ name, type, blocks, rest, seed }) => {
      const shape = [blocks * ggmlTypeInfo(type).blockSize, ...rest];
      const bytes = new Uint8Array(tensorByteSize(type, shape));
      let x = seed >>> 0;
      for (let i = 0; i < bytes.length; i++) {
        x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
        bytes[i] = x >>> 24;
      }
      return { name, type, shape, data: { kind: "bytes" as const, bytes } };
    });
}

export interface ArbitraryModelOptions {
  maxKvs?: number;
  maxTensors?: number;
}

/**
 * Any model this package can write: both versions and byte orders, all value types
 * (nested arrays, unicode and empty strings, empty arrays), power-of-two alignments
 * from 1 to 4096 (or none), and zero or more tensors of every ggml type.
 */
export function arbitraryGgufModel(opts: ArbitraryModelOptions = {}): fc.Arbitrary<GgufModel> {
  return fc
    .record({
      version: fc.constantFrom(2, 3),
      littleEndian: fc.boolean(),
      alignment: fc.option(fc.constantFrom(1, 2, 4, 8, 16, 64, 128, 4096), { nil: undefined }),
      kvs: fc.uniqueArray(arbitraryKv(), { maxLength: opts.maxKvs ?? 8, selector: (kv) => kv.key }),
      tensors: fc.uniqueArray(arbitraryTensor(), { maxLength: opts.maxTensors ?? 4, selector: (t) => t.name }),
    })
    .map(({ version, littleEndian, alignment, kvs, tensors }) => {
      const m = GgufModel.create({ version, littleEndian });
      for (const kv of kvs) m.set(kv.key, kv.type, kv.value);
      if (alignment !== undefined) m.setU32("general.alignment", alignment);
      for (const t of tensors) m.addTensor(t);
      return m;
    });
}
