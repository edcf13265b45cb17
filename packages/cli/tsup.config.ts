import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { packageBuild } from "../../tsup.package";

const { version } = JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8")) as { version: string };
const define = { __CLI_VERSION__: JSON.stringify(version) };

// The three builds run at once, so none cleans dist (the package's build script does, first).
export default [
  // The library (@compat/cli): ESM + CJS + types, sibling packages external, as every package.
  // shims: import.meta.url (which finds dist/demo-model.gguf) also works in the CommonJS builds.
  packageBuild({ entry: ["src/index.ts"], clean: false, define, shims: true }),
  // dist/bin.cjs: the small CommonJS loader of dist/cli.cjs (src/bin.ts); only Node built-ins outside it.
  packageBuild({ entry: ["src/bin.ts"], format: ["cjs"], dts: false, clean: false, splitting: false }),
  // dist/cli.cjs: the command line in one CommonJS file with its dependencies inlined, so the
  // binary resolves no modules and V8 can use a code cache for all of it (src/bin.ts). Each
  // command's modules stay lazy: esbuild initialises a dynamically imported module on first use.
  // @compat/tensor-ops finds its native addon and WASM from its own folder (import.meta.url), and
  // @compat/mount its daemon: inlined, their import.meta.url becomes the URL of the installed
  // package's own entry (resolved on use).
  packageBuild({
    entry: { cli: "src/main.ts" },
    format: ["cjs"],
    dts: false,
    clean: false,
    shims: true,
    define,
    external: [],
    // a third less to read and hand to V8 at every start; names stay, for stack traces
    minifyWhitespace: true,
    minifySyntax: true,
    noExternal: ["commander", "@compat/gguf", "@compat/handlers", "@compat/clip", "@compat/views", "@compat/files", "@compat/store", "@compat/prepare", "@compat/server-bridge", "@compat/ollama-api", "@compat/tensor-ops", "@compat/mount"],
    // a fresh id per build: scripts/code-cache.ts stamps the cache with it, src/bin.ts compares (src/bundle-loader.ts)
    footer: { js: `// ollama-compat build ${randomUUID()}` },
    banner: {
      js: [
        '"use strict";',
        // resolved once: a package-exports lookup costs about 3 ms at start, and the addon's loader asks twice
        'let __tensorOpsHref, __mountHref;',
        'const __tensorOpsUrl = () => (__tensorOpsHref ??= require("node:url").pathToFileURL(require.resolve("@compat/tensor-ops")).href);',
        // @compat/mount only needs its folder (its daemon's): the folder's main file is found where
        // require would look, without Node's package-exports resolver, whose first use costs about
        // 10 ms of serve --all's start (its modules are loaded and compiled); require.resolve if not there
        'const __mountUrl = () => (__mountHref ??= require("node:url").pathToFileURL(__packageMain("@compat/mount", "dist/index.cjs")).href);',
        'function __packageMain(name, main) {',
        '  const { existsSync, realpathSync } = require("node:fs"), { join } = require("node:path");',
        '  for (const dir of require.resolve.paths(name) ?? []) if (existsSync(join(dir, name, main))) return realpathSync(join(dir, name, main));',
        '  return require.resolve(name);',
        '}',
      ].join("\n"),
    },
    esbuildPlugins: [
      {
        // commander loads node:child_process (and with it net, dgram and the streams) at start
        // only for executable subcommands, which this command line has none of: load it on use.
        name: "commander-lazy-child-process",
        setup(build) {
          build.onLoad({ filter: /[\\/]commander[\\/]lib[\\/]command\.js$/ }, async (args) => {
            const source = await readFile(args.path, "utf8");
            const eager = "const childProcess = require('node:child_process');";
            if (!source.includes(eager)) throw new Error(`commander-lazy-child-process: "${eager}" not found in ${args.path}`);
            const lazy = "const childProcess = { spawn: (...a) => require('node:child_process').spawn(...a) };";
            return { contents: source.replace(eager, lazy), loader: "js" };
          });
        },
      },
      {
        name: "tensor-ops-own-folder",
        setup(build) {
          build.onLoad({ filter: /[\\/]tensor-ops[\\/]dist[\\/][^\\/]+\.js$/ }, async (args) => ({
            contents: (await readFile(args.path, "utf8")).replaceAll("import.meta.url", "__tensorOpsUrl()"),
            loader: "js",
          }));
        },
      },
      {
        // @compat/mount finds its daemon (build/, prebuilds/) from its own folder, as tensor-ops its addon
        name: "mount-own-folder",
        setup(build) {
          build.onLoad({ filter: /[\\/]mount[\\/]dist[\\/][^\\/]+\.js$/ }, async (args) => ({
            contents: (await readFile(args.path, "utf8")).replaceAll("import.meta.url", "__mountUrl()"),
            loader: "js",
          }));
        },
      },
    ],
  }),
];
