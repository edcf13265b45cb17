import { rm } from "node:fs/promises";
import type { TranslationProfile } from "@compat/handlers";
import { ownedTempDir } from "@compat/files";
import { prepareModel, TranslationCache } from "@compat/prepare";
import { launch, modelArgs, type RunningServer } from "@compat/server-bridge";
import { ModelStore } from "@compat/store";
import type { FileStatus } from "@compat/views";
import { CliError } from "../errors";
import { ExitCode, paint, type CliIo } from "../io";
import { embeddingLength, llamaErrorText, projectorAnswers, startFailureText, textAnswer } from "../llama-check";
import { jsonText, terminalSafe } from "../terminal";

export interface VerifyFlags {
  llamaServer?: string;
  json?: boolean;
  profile?: TranslationProfile;
}

export interface VerifyResult {
  file: string;
  status: FileStatus;
  pass: boolean;
  translated: boolean;
  mmproj: boolean;
  steps: Array<{ step: string; ok: boolean; detail: string }>;
  /** llama.cpp's error text when it failed. */
  error?: string;
}

/**
 * `verify FILE|MODEL`: translate into a temporary cache, start the real llama-server on the
 * result (as `serve` would, with its --mmproj for vision), ask for a few tokens (an embedding
 * for embedding models) and one image answer for vision, then remove everything.
 */
export async function verifyCommand(file: string, opts: VerifyFlags, io: CliIo, passthrough: string[] = []): Promise<number> {
  const store = new ModelStore(undefined, io.env);
  const resolved = await store.resolve(file);
  // named after this process: a verify killed with SIGKILL cannot remove it, the next one does
  const dir = await ownedTempDir("ollama-compat-verify-");
  const result: VerifyResult = { file, status: "native", pass: false, translated: false, mmproj: false, steps: [] };
  const step = (name: string, ok: boolean, detail: string) => {
    result.steps.push({ step: name, ok, detail });
    if (!opts.json) {
      const c = paint(io, "out");
      io.out(`${ok ? c(32, "ok  ") : c(31, "FAIL")} ${name}: ${terminalSafe(detail)}\n`);
    }
  };
  let server: RunningServer | undefined;
  try {
    const cache = new TranslationCache({ env: io.env, dir, ...(opts.profile ? { profile: opts.profile } : {}) });
    const prepared = await prepareModel(resolved, { cache, env: io.env });
    result.status = prepared.status;
    result.translated = prepared.translated;
    result.mmproj = prepared.mmproj !== undefined;
    step("translate", true, prepared.translated ? `translated (${prepared.handlers.join(", ") || "no text change"}${prepared.mmproj ? ", with mmproj" : ""})` : "nothing to translate, loading the file as it is");
    try {
      server = await launch([...modelArgs(prepared), "--ctx-size", "1024", "--no-warmup"], {
        env: io.env,
        llamaServer: opts.llamaServer,
        startTimeoutMs: 600_000,
        args: passthrough,
      });
    } catch (e) {
      const lines = ((e as { details?: { lastLines?: string[] } }).details?.lastLines ?? []) as string[];
      const msg = e instanceof Error ? e.message.split("\n")[0]! : String(e);
      if (/not found|no llama-server|not an executable/i.test(msg) && lines.length === 0) throw new CliError("error", msg);
      result.error = startFailureText(e, `ollama-compat verify ${file}`);
      step("load in llama-server", false, result.error);
      return finish();
    }
    step("load in llama-server", true, `${server.url} (pid ${server.pid})`);
    try {
      if (prepared.embedding) step("embedding", true, `${await embeddingLength(server.url)} dimensions`);
      else {
        const t = await textAnswer(server.url);
        step("generate", t.completionTokens > 0, `${t.completionTokens} tokens: ${JSON.stringify(t.text)}`);
      }
      // an image answer for a vision projector, an audio answer for one that encodes sound
      if (prepared.mmproj) for (const a of await projectorAnswers(server.url, prepared.mmproj)) step(`${a.input} answer`, a.ok, a.detail);
    } catch (e) {
      result.error = `${e instanceof Error ? e.message : String(e)}${server ? ` (${llamaErrorText(server.lastLines(20))})` : ""}`;
      step("request", false, result.error);
    }
    return finish();
  } finally {
    await server?.stop();
    await rm(dir, { recursive: true, force: true });
  }

  function finish(): number {
    result.pass = result.steps.every((s) => s.ok);
    const exit = result.pass ? ExitCode.ok : result.status === "not-supported" ? ExitCode.notSupported : ExitCode.error;
    if (opts.json) io.out(jsonText({ ...result, exitCode: exit }, 2) + "\n");
    else {
      const c = paint(io, "out");
      io.out(`${terminalSafe(file)}: ${result.pass ? c(32, "PASS") : c(31, "FAIL")}${result.pass ? " (llama.cpp loaded it and answered)" : `: ${terminalSafe(result.error ?? "see above")}`}\n`);
    }
    return exit;
  }
}
