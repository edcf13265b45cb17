// keep_alive's Go durations, as Ollama reads them: the micro sign spelled in the source as an
// escape (the CLI bundle stays ASCII) still reads as the unit.
import { describe, expect, it } from "vitest";
import { parseKeepAlive } from "../src/duration";

describe("parseKeepAlive", () => {
  it("reads Go durations with every unit, the micro sign included", () => {
    expect(parseKeepAlive("1500\u00b5s")).toBeCloseTo(1.5, 9);
    expect(parseKeepAlive("1500us")).toBeCloseTo(1.5, 9);
    expect(parseKeepAlive("2ms500000ns")).toBeCloseTo(2.5, 9);
    expect(parseKeepAlive("1h30m")).toBe(90 * 60_000);
    expect(parseKeepAlive("-1s")).toBe(Infinity);
  });

  it("refuses what is not a duration", () => {
    expect(() => parseKeepAlive("5 minutes")).toThrow(/invalid duration/);
  });
});
