import { elementCount, ggmlTypeName } from "./ggml-types";
import { GgufKeys, fileTypeName } from "./keys";
import type { GgufModel } from "./model";
import { tensorDataLength } from "./model";
import { GgufValueType } from "./types";

export interface GgufSummary {
  architecture: string;
  name?: string;
  /** Total elements over all tensors. */
  parameterCount: number;
  /** general.file_type as a name ("Q4_K_M"), or "type<N>" for unknown numbers. */
  fileType?: string;
  fileTypeId?: number;
  tensorCount: number;
  kvCount: number;
  /** Data bytes per ggml type name ("q4_K", "f32", …). */
  bytesByType: Record<string, number>;
  /** Sum of all tensor data bytes (without padding). */
  totalTensorBytes: number;
}

/** What a CLI prints about a model: architecture, size, quantization and per-type bytes. */
export function summarize(model: GgufModel): GgufSummary {
  const arch = model.get(GgufKeys.ARCHITECTURE);
  const name = model.get(GgufKeys.NAME);
  const ft = model.get(GgufKeys.FILE_TYPE);
  let parameterCount = 0;
  let totalTensorBytes = 0;
  const bytesByType: Record<string, number> = {};
  for (const t of model.tensors) {
    parameterCount += elementCount(t.shape);
    const bytes = tensorDataLength(t);
    totalTensorBytes += bytes;
    const key = ggmlTypeName(t.type);
    bytesByType[key] = (bytesByType[key] ?? 0) + bytes;
  }
  const summary: GgufSummary = {
    architecture: arch?.type === GgufValueType.STRING ? (arch.value as string) : "unknown",
    parameterCount,
    tensorCount: model.tensors.length,
    kvCount: model.kvCount,
    bytesByType,
    totalTensorBytes,
  };
  if (name?.type === GgufValueType.STRING) summary.name = name.value as string;
  if (ft !== undefined && typeof ft.value === "number") {
    summary.fileTypeId = ft.value;
    summary.fileType = fileTypeName(ft.value) ?? `type${ft.value}`;
  }
  return summary;
}
