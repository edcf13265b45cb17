// The page's logic: read the header of a File with @compat/gguf, ask @compat/handlers what a
// translation for llama.cpp would change (its --dry-run report), and show both. No upload.
import { readGguf, summarize } from "@compat/gguf";
import { translate } from "@compat/handlers";

const out = document.getElementById("out");

function table(rows) {
  const t = document.createElement("table");
  for (const [k, v] of rows) {
    const tr = t.insertRow();
    const th = document.createElement("th");
    th.textContent = k;
    tr.append(th);
    tr.insertCell().textContent = String(v);
  }
  return t;
}

function section(title, ...nodes) {
  const h = document.createElement("h2");
  h.textContent = title;
  out.append(h, ...nodes);
}

function line(text, cls) {
  const p = document.createElement("p");
  p.textContent = text;
  if (cls) p.className = cls;
  return p;
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
  const s = summarize(model);
  section(
    file.name,
    table([
      ["architecture", s.architecture],
      ["tensors", s.tensorCount],
      ["metadata keys", s.kvCount],
      ["parameters", s.parameterCount.toLocaleString("en")],
      ["file type", s.fileType ?? "-"],
      ...Object.entries(s.bytesByType).map(([type, bytes]) => [`${type} bytes`, bytes.toLocaleString("en")]),
    ]),
  );
  const view = await translate(model);
  if (view === null) {
    section("For llama.cpp", line("Nothing to do: llama.cpp loads this file as it is.", "verdict"));
    return;
  }
  const r = view.report;
  section(
    "For llama.cpp",
    line(`Ollama-format file: ${r.handlers.map((h) => h.name).join(", ")} would translate it.`, "verdict"),
    table([
      ["architecture", r.arch.from === r.arch.to ? r.arch.to : `${r.arch.from} → ${r.arch.to}`],
      ["keys added", r.kv.added.length],
      ["keys changed", r.kv.changed.length],
      ["keys removed", r.kv.removed.length],
      ["tensors renamed", r.tensors.renamed.length],
      ["tensors hidden", r.tensors.hidden.length],
      ["tensors computed", r.ops.length],
    ]),
    line(`Markers: ${r.handlers.flatMap((h) => h.markers).join("; ")}`),
  );
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
