/**
 * `@compat/gguf/advanced`: the implementation classes behind the everyday entry, for
 * code that builds arrays from typed arrays or raw string bytes itself, or validates
 * tensors the way the writer does. Most callers need only `@compat/gguf`.
 */
export {
  NumberArray,
  BigIntArray,
  BoolArray,
  StringArray,
  NestedArray,
  valueTypeSize,
  type RawStrings,
  type NumberItemType,
  type NumberTypedArray,
  type BigIntTypedArray,
} from "./arrays";
export { isByteSource } from "./sources";
export { checkTensor, tensorDataLength } from "./model";
