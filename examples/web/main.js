// The page's logic: read the header of a File with @compat/gguf, ask @compat/handlers what a
// translation for llama.cpp would change (the text GGUF) and @compat/clip what mmproj it would
// write (a vision/audio tower embedded in the file), and show both with the command that does
// it. Only the header is read; nothing is uploaded.
import { ggmlTypeName, GgufValueType, readGguf, summarize, valueTypeName } from "@compat/gguf";
import { translateModel } from "@compat/handlers";
import { clipViewModel } from "@compat/clip";

const out = document.getElementById("out");

/** Arrays longer than this show their first items and a count (tokenizer vocabularies run to 262k). */
const ITEMS_SHOWN = 8;
const STRING_SHOWN = 120;
/** Tensor lists longer than this start folded. */
const LIST_OPEN = 24;

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props);
  e.append(...children);
  return e;
}

function table(headers, rows, rowClass) {
  const t = el("table");
  if (headers) t.createTHead().insertRow().append(...headers.map((h) => el("th", { textContent: h })));
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    if (rowClass) tr.className = rowClass;
    for (const [i, cell] of row.entries()) {
      const c = !headers && i === 0 ? el("th") : tr.insertCell();
      if (!headers && i === 0) tr.append(c);
      if (cell instanceof Node) c.append(cell);
      else c.textContent = String(cell);
    }
  }
  return t;
}

function section(title, ...nodes) {
  const s = el("section", {}, el("h2", { textContent: title }), ...nodes);
  out.append(s);
  return s;
}

function line(text, cls) {
  return el("p", { textContent: text, className: cls ?? "" });
}

function showString(s) {
  const json = JSON.stringify(s);
  return json.length > STRING_SHOWN ? `${json.slice(0, STRING_SHOWN - 4)}…" (${s.length} chars)` : json;
}

/** A metadata value as `inspect` prints it: strings quoted, long arrays cut with a count. */
function showValue(v) {
  if (typeof v === "string") return showString(v);
  if (typeof v === "object" && v !== null) {
    const n = Math.min(v.length, ITEMS_SHOWN);
    const items = [];
    for (let i = 0; i < n; i++) items.push(showValue(v.at(i)));
    return `[${items.join(", ")}${v.length > n ? `, … ${v.length - n} more` : ""}]`;
  }
  return String(v);
}

function typeLabel(kv) {
  return kv.type === GgufValueType.ARRAY ? `ARRAY<${valueTypeName(kv.value.itemType)}>[${kv.value.length}]` : valueTypeName(kv.type);
}

const code = (text) => el("code", { textContent: text });

/** A list that folds when long: `label (count)` as its summary. */
function list(label, nodes, cls) {
  const d = el("details", { className: `list ${cls ?? ""}`, open: nodes.length <= LIST_OPEN });
  d.append(el("summary", { textContent: `${label} (${nodes.length.toLocaleString("en")})` }), el("ul", {}, ...nodes.map((n) => el("li", {}, n))));
  return d;
}

/** The metadata a translation adds, changes and removes, each with its values. */
function keyChanges(source, output, kv) {
  const rows = [];
  for (const key of kv.added) {
    const after = output.get(key);
    rows.push({ cls: "added", cells: ["added", code(key), "", `${typeLabel(after)} = ${showValue(after.value)}`] });
  }
  for (const key of kv.changed) {
    const before = source.get(key);
    const after = output.get(key);
    rows.push({ cls: "changed", cells: ["changed", code(key), `${typeLabel(before)} = ${showValue(before.value)}`, `${typeLabel(after)} = ${showValue(after.value)}`] });
  }
  for (const key of kv.removed) {
    const before = source.get(key);
    rows.push({ cls: "removed", cells: ["removed", code(key), `${typeLabel(before)} = ${showValue(before.value)}`, ""] });
  }
  if (rows.length === 0) return line("Metadata: unchanged.");
  const t = table(["", "key", "before", "after"], []);
  t.className = "kv-diff";
  for (const r of rows) {
    const tr = t.tBodies[0].insertRow();
    tr.className = r.cls;
    for (const cell of r.cells) {
      const c = tr.insertCell();
      if (cell instanceof Node) c.append(cell);
      else c.textContent = cell;
    }
  }
  return t;
}

/** What happens to the tensors: renamed, retyped, reshaped, hidden, dropped, added, computed by a load op. */
function tensorChanges(r) {
  const t = r.tensors;
  const parts = [
    ["tensors renamed", t.renamed.map((x) => `${x.from} → ${x.to}`), "renamed"],
    ["tensors retyped", t.retyped.map((x) => `${x.name}: ${x.from} → ${x.to}`), "retyped"],
    ["tensors reshaped", t.reshaped.map((x) => `${x.name}: [${x.from.join(", ")}] → [${x.to.join(", ")}]`), "reshaped"],
    ["tensors hidden", t.hidden, "hidden"],
    ["tensors dropped", t.dropped, "dropped"],
    ["tensors added", t.added, "added"],
    ["tensors computed", r.ops.map((o) => `${o.tensor} ← ${o.label}(${o.inputs.join(", ")})`), "computed"],
  ].filter(([, items]) => items.length > 0);
  if (parts.length === 0) return [line("Tensors: unchanged.")];
  return parts.map(([label, items, cls]) => list(label, items.map(code), cls));
}

/** `'a b'` for the shell; plain names as they are. */
function sh(word) {
  return /^[\w./:@%+=-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** A name for the translated file: the dropped file's own, or for a blob (sha256-…) its model's. */
function outputStem(fileName, summary) {
  const stem = fileName.replace(/\.gguf$/i, "");
  if (!/^sha256[-:][0-9a-f]{16,}$/i.test(stem)) return `${stem}-llamacpp`;
  const named = (summary.name ?? summary.architecture).toLowerCase().replace(/[^a-z0-9._-]+/g, "-").replace(/^-+|-+$/g, "");
  return named || "model";
}

/** The commands that do it: translate (text GGUF and mmproj) and serve the result with stock llama-server. */
function commands(fileName, summary, text, mmproj) {
  const stem = outputStem(fileName, summary);
  if (text === null && mmproj === null) return [`llama-server -m ${sh(fileName)}`];
  if (text === null) {
    // a projector on its own (an old LLaVA projector blob): it is the mmproj
    const proj = `mmproj-${stem}.gguf`;
    return [`ollama-compat translate ${sh(fileName)} -o ${sh(proj)}`, `llama-server -m MODEL.gguf --mmproj ${sh(proj)}`];
  }
  const model = `${stem}.gguf`;
  const lines = [`ollama-compat translate ${sh(fileName)} -o ${sh(model)}`];
  lines.push(mmproj === null ? `llama-server -m ${sh(model)}` : `llama-server -m ${sh(model)} --mmproj ${sh(`mmproj-${stem}.gguf`)}`);
  return lines;
}

function tensorTable(model) {
  const rows = model.tensors.map((t) => [code(t.name), ggmlTypeName(t.type), `[${t.shape.join(", ")}]`]);
  const d = el("details", { className: "list mmproj-tensors", open: rows.length <= LIST_OPEN });
  d.append(el("summary", { textContent: `tensors (${rows.length.toLocaleString("en")})` }), table(["name", "type", "shape"], rows));
  return d;
}

/** The mmproj's metadata against the source's: the clip.* keys it gets, and the text model's keys it leaves out. */
function mmprojKeys(source, mmproj) {
  const kv = mmproj.report.kv;
  const d = el("details", { className: "list mmproj-keys" });
  d.append(el("summary", { textContent: `metadata (${kv.added.length} added, ${kv.changed.length} changed, ${kv.removed.length} of the text model's left out)` }), keyChanges(source, mmproj.model, kv));
  return d;
}

export async function show(file) {
  out.replaceChildren();
  let model;
  try {
    model = await readGguf(file);
  } catch (e) {
    out.append(line(`Not a readable GGUF: ${e.message}`, "error"));
    return;
  }
  try {
    const s = summarize(model);
    section(
      file.name,
      table(null, [
        ["architecture", s.architecture],
        ...(s.name !== undefined ? [["name", s.name]] : []),
        ["tensors", s.tensorCount],
        ["metadata keys", s.kvCount],
        ["parameters", s.parameterCount.toLocaleString("en")],
        ["file type", s.fileType ?? "-"],
        ...Object.entries(s.bytesByType).map(([type, bytes]) => [`${type} bytes`, bytes.toLocaleString("en")]),
      ]),
    );
    // Each view works on its own copy of the metadata: one model serves both.
    const text = translateModel(model);
    const mmproj = clipViewModel(model);
    if (text === null && mmproj === null) {
      section("For llama.cpp", line("Nothing to do: llama.cpp loads this file as it is.", "verdict"));
    } else {
      const handlers = [...(text?.report.handlers ?? []), ...(mmproj?.report.handlers ?? [])];
      section("For llama.cpp", line(`Ollama-format file: ${handlers.map((h) => h.name).join(", ")} would translate it.`, "verdict"), line(`Markers: ${handlers.flatMap((h) => h.markers).join("; ")}`));
    }
    if (text !== null) {
      const r = text.report;
      section(
        "The text GGUF: what translation changes",
        table(null, [
          ["architecture", r.arch.from === r.arch.to ? r.arch.to : `${r.arch.from} → ${r.arch.to}`],
          ["keys added", r.kv.added.length],
          ["keys changed", r.kv.changed.length],
          ["keys removed", r.kv.removed.length],
          ["tensors renamed", r.tensors.renamed.length],
          ["tensors hidden", r.tensors.hidden.length],
          ["tensors computed", r.ops.length],
        ]),
        keyChanges(model, text.model, r.kv),
        ...tensorChanges(r),
        ...(r.fixes.length > 0 ? [list("fixes of the reference's known gaps", r.fixes.map((f) => el("span", {}, code(f.name), ` (${f.handler}): ${f.reason}`)), "fixes")] : []),
      ).id = "text-diff";
    }
    if (mmproj !== null) {
      const m = mmproj.model;
      const projector = m.get("clip.projector_type")?.value ?? m.get("clip.vision.projector_type")?.value ?? m.get("clip.audio.projector_type")?.value;
      const towers = ["vision", "audio"].filter((k) => m.get(`clip.has_${k}_encoder`)?.value === true);
      section(
        "The mmproj it writes (the projector, for llama.cpp's --mmproj)",
        table(null, [
          ["architecture", m.getString("general.architecture", "")],
          ["projector type", projector ?? "-"],
          ["encoders", towers.join(", ") || "-"],
          ["tensors", m.tensors.length],
          ["metadata keys", m.kvCount],
          ["size", `${mmproj.size.toLocaleString("en")} bytes`],
        ]),
        tensorTable(m),
        mmprojKeys(model, mmproj),
      ).id = "mmproj";
    }
    section(
      "The command",
      el("pre", { className: "command", textContent: commands(file.name, s, text, mmproj).join("\n") }),
      line(
        text === null && mmproj === null
          ? "Run it in the folder that holds the file."
          : "Run it in the folder that holds the file (for a model in your Ollama store, ollama-compat serve NAME:TAG does both steps); the source file is never modified.",
      ),
    ).id = "command";
  } finally {
    await model.close();
  }
}

const input = document.getElementById("file");
input.addEventListener("change", () => input.files[0] && show(input.files[0]));
const drop = document.getElementById("drop");
drop.addEventListener("dragover", (e) => {
  e.preventDefault();
  drop.classList.add("over");
});
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  const f = e.dataTransfer?.files[0];
  if (f) show(f);
});
