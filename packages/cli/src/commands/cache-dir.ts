import { resolve } from "node:path";
import type { TranslationProfile } from "@compat/handlers";
import { TranslationCache } from "@compat/prepare";

/**
 * The environment a command hands the bridge. `--cache-dir DIR` is `OLLAMA_COMPAT_CACHE=DIR`
 * for this one command, by construction: the same folder, translations in `DIR/translated`,
 * the tools scripts/build-llama-tools.sh builds in `DIR/llama.cpp`.
 */
export function bridgeEnv(env: Record<string, string | undefined>, cacheDir: string | undefined): Record<string, string | undefined> {
  return cacheDir === undefined ? env : { ...env, OLLAMA_COMPAT_CACHE: resolve(cacheDir) };
}

/** The translation cache a command uses: under `--cache-dir`, else `$OLLAMA_COMPAT_CACHE`, else the default. */
export function commandCache(env: Record<string, string | undefined>, profile: TranslationProfile | undefined): TranslationCache {
  return new TranslationCache({ env, ...(profile ? { profile } : {}) });
}
