/**
 * Lines of llama-server's own that say why a load failed, as Ollama picks them out of its
 * runner's output (llm/status.go).
 */
const ERROR_LINE = /error:|error loading model|GGML_ASSERT|panic:|fatal error|failed to (load|allocate)|out of memory|not enough memory|unknown model architecture/i;

/** A buffer llama.cpp allocated while loading: `load_tensors: CPU_Mapped model buffer size = 54.43 MiB`. */
const BUFFER = /^\s*[a-z_]+:\s+(\S+)\s+(?:model|KV|compute|output|[A-Za-z]+) buffer size =\s+([\d.]+) MiB/;

interface Instance {
  error?: string;
  /** Bytes of every buffer, and of those on a device other than the CPU (what Ollama calls VRAM). */
  total: number;
  vram: number;
}

/**
 * What each model instance of the router says about itself, read from the router's log: the
 * router passes every instance's output on as `[ port] line`, after saying which model it
 * spawned on which port. Feed it every router log line.
 */
export class InstanceLog {
  private readonly byPort = new Map<string, Instance>();
  private readonly byName = new Map<string, Instance>();

  readonly onLog = (line: string): void => {
    const spawn = /spawning server instance with name=(\S+) on port (\d+)/.exec(line);
    if (spawn) {
      const inst: Instance = { total: 0, vram: 0 };
      this.byPort.set(spawn[2]!, inst);
      this.byName.set(spawn[1]!, inst);
      return;
    }
    const m = /^\[\s*(\d+)\] (.*)$/.exec(line);
    const inst = m && this.byPort.get(m[1]!);
    if (!inst) return;
    const text = m[2]!;
    const buffer = BUFFER.exec(text);
    if (buffer) {
      const bytes = Math.round(Number(buffer[2]) * 2 ** 20);
      inst.total += bytes;
      if (!/^CPU/i.test(buffer[1]!)) inst.vram += bytes;
    } else if (ERROR_LINE.test(text)) {
      // the first says why (`llama_model_load: error loading model: missing tensor …`); the later ones that it failed
      inst.error ??= text.replace(/^[\d.]+ [A-Z] /, "").trim();
    }
  };

  private of(routerName: string): Instance | undefined {
    // the router names an instance by its preset section (`a@latest`); requests use the alias (`a:latest`)
    return this.byName.get(routerName) ?? this.byName.get(routerName.replaceAll(":", "@"));
  }

  /** The first error line the latest instance of `routerName` printed (without llama.cpp's time and level). */
  errorOf(routerName: string): string | undefined {
    return this.of(routerName)?.error;
  }

  /** The memory the latest instance of `routerName` allocated (undefined: it said nothing about it). */
  memoryOf(routerName: string): { total: number; vram: number } | undefined {
    const inst = this.of(routerName);
    return inst && inst.total > 0 ? { total: inst.total, vram: inst.vram } : undefined;
  }
}
