/** What may be printed to a terminal, and how text from outside is made so. */
/**
 * Characters a terminal acts on instead of showing: C0 controls (ESC starts a sequence that
 * can retitle the window, move the cursor or rewrite what is shown; a newline starts a line
 * that looks like ours), DEL, C1 controls (U+009B is CSI on some terminals), line and
 * paragraph separators, and the bidirectional overrides that reorder what is shown.
 */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;
const UNSAFE_KEEPING_NEWLINES = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

function escapeChar(c: string): string {
  const code = c.charCodeAt(0);
  if (c === "\n") return "\\n";
  if (c === "\r") return "\\r";
  if (c === "\t") return "\\t";
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/**
 * Text from outside (a file's metadata or tensor names, a model name, a path, an error that
 * quotes them) made safe to print on a terminal, on one line: every control character shown
 * as an escape (`\x1b`, `\n`), everything else as it is.
 */
export function terminalSafe(text: string): string {
  return text.replace(UNSAFE, escapeChar);
}

/** terminalSafe for output of many lines: the line breaks stay, every other control character is escaped. */
export function terminalSafeLines(text: string): string {
  return text.replace(UNSAFE_KEEPING_NEWLINES, escapeChar);
}

/** UNSAFE but the C0 controls, which JSON.stringify escapes in strings itself (its raw newlines are the indentation). */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

/** JSON for output: the rest of UNSAFE, which only occurs inside strings, gets `\uXXXX` escapes too (the same JSON value). */
export function jsonText(value: unknown, indent?: number): string {
  return (JSON.stringify(value, null, indent) ?? "null").replace(UNSAFE_IN_JSON, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
