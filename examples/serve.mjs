// Start llama-server on a model from code with @compat/server-bridge, ask it one thing, stop it.
// Usage: node serve.mjs MODEL   (an Ollama name such as gemma3:4b, or a GGUF path)
// llama-server is found through --llama-server/LLAMA_SERVER or PATH.
import { startServer } from "@compat/server-bridge";

const server = await startServer({ model: process.argv[2] });
try {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: "Hello", max_tokens: 4, temperature: 0 }),
  });
  const body = await res.json();
  console.log(`${server.url} answered: ${JSON.stringify(body.choices[0].text)}`);
} finally {
  await server.stop();
}
