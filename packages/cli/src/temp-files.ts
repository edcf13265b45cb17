/**
 * Temp files the CLI itself is writing (export's small text files and links, made beside
 * their target and renamed into place); @compat/gguf keeps its own writers' in
 * pendingTempFiles(). The binary's exit handler (main.ts) removes both, so a signal leaves
 * neither behind. No imports: main.ts loads this at start-up.
 */
const live = new Set<string>();

export function trackTempFile(path: string): void {
  live.add(path);
}

export function untrackTempFile(path: string): void {
  live.delete(path);
}

export function cliTempFiles(): readonly string[] {
  return [...live];
}
