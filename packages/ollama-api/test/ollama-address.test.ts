import { describe, expect, it } from "vitest";
import { ollamaAddress } from "@compat/ollama-api";

describe("OLLAMA_HOST, read as Ollama reads it (envconfig.Host)", () => {
  it.each([
    [undefined, "127.0.0.1", 11434],
    ["", "127.0.0.1", 11434],
    ["0.0.0.0", "0.0.0.0", 11434],
    ["0.0.0.0:8080", "0.0.0.0", 8080],
    [":8080", "127.0.0.1", 8080],
    ["localhost:1234", "localhost", 1234],
    ["[::1]:1234", "::1", 1234],
    ["::1", "::1", 11434],
    ["http://example.local", "example.local", 80],
    ["https://example.local", "example.local", 443],
    ["http://10.0.0.5:9999/some/path", "10.0.0.5", 9999],
  ])("%s -> %s:%d", (value, host, port) => expect(ollamaAddress(value === undefined ? {} : { OLLAMA_HOST: value })).toEqual({ host, port }));
});
