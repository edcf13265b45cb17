// Fails when the workspace packages depend on each other in a cycle, counting
// devDependencies too: a package's tests must not need a package that needs it.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dirname, "..", "packages");
const deps = new Map();
for (const dir of readdirSync(root)) {
  const pkg = JSON.parse(readFileSync(join(root, dir, "package.json"), "utf8"));
  deps.set(pkg.name, Object.keys({ ...pkg.dependencies, ...pkg.devDependencies }));
}

const state = new Map(); // name -> "open" while on the path, "done" after
const cycles = [];
function visit(name, path) {
  if (state.get(name) === "done") return;
  if (state.get(name) === "open") {
    cycles.push([...path.slice(path.indexOf(name)), name].join(" -> "));
    return;
  }
  state.set(name, "open");
  for (const dep of deps.get(name) ?? []) if (deps.has(dep)) visit(dep, [...path, name]);
  state.set(name, "done");
}
for (const name of deps.keys()) visit(name, []);

if (cycles.length > 0) {
  console.error(`package dependency cycles (devDependencies included):\n  ${cycles.join("\n  ")}`);
  process.exit(1);
}
console.log(`no package dependency cycles among ${deps.size} packages`);
