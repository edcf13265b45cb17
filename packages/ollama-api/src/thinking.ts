/**
 * A thinking trace at the start of a model's raw output, split off as Ollama's thinking.Parser
 * does for a model rendered with its Go template: blanks, the opening tag, the trace up to the
 * closing tag (blanks after either tag dropped), then the answer. Output that does not start
 * with the opening tag is all answer. A tag cut between two pieces is held until it is whole.
 */
export class ThinkingParser {
  private state: "opening" | "startBlanks" | "thinking" | "endBlanks" | "done" = "opening";
  private acc = "";

  constructor(
    readonly open: string,
    readonly close: string,
  ) {}

  /** One piece of output: the part of it that is trace, and the part that is answer. */
  add(s: string): { thinking: string; content: string } {
    this.acc += s;
    let thinking = "";
    let content = "";
    for (;;) {
      const r = this.step();
      thinking += r.thinking;
      content += r.content;
      if (!r.again) return { thinking, content };
    }
  }

  private step(): { thinking: string; content: string; again: boolean } {
    const none = { thinking: "", content: "", again: false };
    switch (this.state) {
      case "opening": {
        const trimmed = this.acc.trimStart();
        if (trimmed.startsWith(this.open)) {
          this.acc = trimmed.slice(this.open.length).trimStart();
          this.state = this.acc === "" ? "startBlanks" : "thinking";
          return { ...none, again: true };
        }
        if (this.open.startsWith(trimmed)) return none; // blank, or the tag's beginning so far
        this.state = "done";
        const all = this.acc;
        this.acc = "";
        return { ...none, content: all };
      }
      case "startBlanks": {
        const trimmed = this.acc.trimStart();
        this.acc = trimmed;
        if (trimmed === "") return none;
        this.state = "thinking";
        return { ...none, again: true };
      }
      case "thinking": {
        const at = this.acc.indexOf(this.close);
        if (at >= 0) {
          const trace = this.acc.slice(0, at);
          const rest = this.acc.slice(at + this.close.length).trimStart();
          this.acc = "";
          this.state = rest === "" ? "endBlanks" : "done";
          return { ...none, thinking: trace, content: rest };
        }
        let keep = 0;
        for (let k = Math.min(this.close.length, this.acc.length); k > 0; k--) {
          if (this.acc.endsWith(this.close.slice(0, k))) {
            keep = k;
            break;
          }
        }
        const trace = this.acc.slice(0, this.acc.length - keep);
        this.acc = this.acc.slice(this.acc.length - keep);
        return { ...none, thinking: trace };
      }
      case "endBlanks": {
        const trimmed = this.acc.trimStart();
        this.acc = "";
        if (trimmed !== "") this.state = "done";
        return { ...none, content: trimmed };
      }
      case "done": {
        const all = this.acc;
        this.acc = "";
        return { ...none, content: all };
      }
    }
  }
}
