// The package graph, checked (`npm run check:deps`, after knip, which sees the workspace's own
// packages through tsconfig paths and so does not check them):
//   1. every @compat/* import is declared: a package's src/ in its dependencies, its tests,
//      benches and scripts in its dependencies or devDependencies; and every declared
//      dependency is imported by src/ (but for RUNTIME_ONLY below);
//   2. no cycle, devDependencies included: a package's tests must not need a package that needs it;
//   3. docs/architecture.md's table of dependencies is the package.json files' own.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const repo = join(import.meta.dirname, "..");
const root = join(repo, "packages");

/**
 * Dependencies a package needs at run time without importing them in src/, and why.
 * The CLI's bundle inlines @compat/mount through @compat/prepare and finds the mount daemon
 * (build/, prebuilds/) in that package's installed folder, so it must be installed beside it.
 */
const RUNTIME_ONLY = { "@compat/cli": ["@compat/mount"] };

const SKIP = new Set(["node_modules", "dist", "build", "prebuilds", "coverage"]);
function sources(dir, out = []) {
  for (const entry of readdirSync(dir)) {
    if (SKIP.has(entry)) continue;
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) sources(path, out);
    else if (/\.(ts|mts|cts|mjs|cjs|js)$/.test(entry)) out.push(path);
  }
  return out;
}

const packages = new Map(); // name -> { dir, deps, dev }
for (const dir of readdirSync(root)) {
  const pkg = JSON.parse(readFileSync(join(root, dir, "package.json"), "utf8"));
  packages.set(pkg.name, { dir, deps: Object.keys(pkg.dependencies ?? {}), dev: Object.keys(pkg.devDependencies ?? {}) });
}
const workspace = (names) => names.filter((n) => packages.has(n));
const problems = [];

// 1. declared = imported
for (const [name, { dir, deps, dev }] of packages) {
  const fromSrc = new Set();
  const fromRest = new Set();
  for (const file of sources(join(root, dir))) {
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*)["'](@compat\/[a-z0-9-]+)/g)) {
      if (m[1] === name) continue;
      (relative(join(root, dir), file).startsWith("src/") ? fromSrc : fromRest).add(m[1]);
    }
  }
  for (const used of fromSrc) if (!deps.includes(used)) problems.push(`${name}: src/ imports ${used}, which is not in its dependencies`);
  for (const used of fromRest) if (!deps.includes(used) && !dev.includes(used)) problems.push(`${name}: its tests or scripts import ${used}, which it does not declare`);
  for (const dep of workspace(deps)) {
    if (!fromSrc.has(dep) && !(RUNTIME_ONLY[name] ?? []).includes(dep)) problems.push(`${name}: depends on ${dep}, which src/ does not import`);
  }
}

// 2. no cycles
const state = new Map(); // name -> "open" while on the path, "done" after
function visit(name, path) {
  if (state.get(name) === "done") return;
  if (state.get(name) === "open") {
    problems.push(`dependency cycle (devDependencies included): ${[...path.slice(path.indexOf(name)), name].join(" -> ")}`);
    return;
  }
  state.set(name, "open");
  const { deps, dev } = packages.get(name);
  for (const dep of workspace([...deps, ...dev])) visit(dep, [...path, name]);
  state.set(name, "done");
}
for (const name of packages.keys()) visit(name, []);

// 3. the documented graph
const doc = readFileSync(join(repo, "docs/architecture.md"), "utf8");
const documented = new Map();
for (const m of doc.matchAll(/^\| `(@compat\/[a-z0-9-]+)`(?: \(private\))? \| ([^|]+) \|$/gm)) {
  documented.set(m[1], m[2].trim() === "—" ? [] : m[2].split(",").map((d) => `@compat/${d.trim()}`));
}
for (const [name, { deps }] of packages) {
  const want = workspace(deps).sort().join(", ");
  const have = documented.get(name)?.slice().sort().join(", ");
  if (have === undefined) problems.push(`docs/architecture.md: no row for ${name} in the table of dependencies`);
  else if (have !== want) problems.push(`docs/architecture.md: ${name} depends on ${want || "nothing"}, the table says ${have || "nothing"}`);
}
for (const name of documented.keys()) if (!packages.has(name)) problems.push(`docs/architecture.md: ${name} is not a package`);

if (problems.length > 0) {
  console.error(problems.join("\n"));
  process.exit(1);
}
console.log(`${packages.size} packages: every @compat import declared, no cycles, docs/architecture.md's table matches`);
