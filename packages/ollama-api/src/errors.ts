/**
 * A request the Ollama API refuses, with the HTTP status and the message Ollama gives for it
 * (server/routes.go): clients show `error` to their users as it is.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

export const badRequest = (message: string) => new ApiError(400, message);
export const modelNotFound = (name: string) => new ApiError(404, `model '${name}' not found`);

/** The message of an error body from llama-server (`{"error": {"message"}}` or `{"error": "…"}`), else the text itself. */
export function upstreamMessage(text: string): string {
  try {
    const body = JSON.parse(text) as { error?: unknown; message?: unknown };
    const e = body.error;
    if (typeof e === "string") return e;
    if (e && typeof e === "object" && typeof (e as { message?: unknown }).message === "string") return (e as { message: string }).message;
    if (typeof body.message === "string") return body.message;
  } catch {
    // not JSON: the text is the message
  }
  return text.trim() || "llama-server gave no reason";
}
