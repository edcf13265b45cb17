/**
 * The ggml type table (numbers, names, block sizes, block bytes) is @compat/gguf's: GgmlType,
 * ggmlTypeInfo, ggmlTypeName. This module only turns an unknown type number into this package's
 * typed error.
 */
import { ggmlTypeInfo, isKnownGgmlType, type GgmlTypeInfo } from "@compat/gguf";
import { UnknownTypeError } from "./errors";

/** gguf's entry for a ggml type; UnknownTypeError for numbers outside the table. */
export function typeInfo(type: number): GgmlTypeInfo {
  if (!isKnownGgmlType(type)) throw new UnknownTypeError(type);
  return ggmlTypeInfo(type);
}
