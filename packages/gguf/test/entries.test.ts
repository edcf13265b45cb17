import { describe, expect, it } from "vitest";
import * as everyday from "@compat/gguf";
import * as advanced from "@compat/gguf/advanced";

describe("entries", () => {
  it("the everyday entry has no implementation classes; the advanced one has them", () => {
    for (const name of ["NumberArray", "StringArray", "checkTensor", "tensorDataLength", "isByteSource", "valueTypeSize"]) {
      expect(name in everyday, name).toBe(false);
      expect(name in advanced, name).toBe(true);
    }
  });

  it("arrays the model builds are the advanced entry's classes", () => {
    const m = everyday.GgufModel.create();
    m.setArray("ids", everyday.GgufValueType.UINT32, [1, 2]);
    expect(m.get("ids")!.value).toBeInstanceOf(advanced.NumberArray);
  });
});
