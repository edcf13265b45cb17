/**
 * `OLLAMA_LLAMA_CPP_COMPAT=0` turns every translation off, exactly as in Ollama's
 * own loader hooks: only the literal "0" disables, any other value (or none) enables.
 */
export function compatEnabled(env: Record<string, string | undefined> = processEnv()): boolean {
  return env.OLLAMA_LLAMA_CPP_COMPAT !== "0";
}

/** process.env in Node; an empty environment in a browser, where there is no process. */
function processEnv(): Record<string, string | undefined> {
  return typeof process !== "undefined" ? process.env : {};
}
