import { tempDirs as tempDirsFor } from "@compat/testkit";
import { afterAll } from "vitest";

export { llamaServerPath } from "@compat/testkit";

/** A fresh temp dir per call, all removed after the file's tests. */
export const tempDirs = (): (() => Promise<string>) => tempDirsFor(afterAll);
