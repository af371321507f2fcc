import type { SSEWriter } from '../http/sse-writer.ts';
import type { JsonObject } from '../types.ts';

/** The AI SDK UI stream's finish reason for a turn that ended with `finished`. */
export function finishReason(finished: JsonObject): 'tool-calls' | 'length' | 'stop' {
  return finished['pending_approvals'] !== undefined ? 'tool-calls' : finished['truncated'] === true ? 'length' : 'stop';
}

/** The last part and `[DONE]`, as one frame. */
export function lastFrames(part: Record<string, unknown>): string {
  return `data: ${JSON.stringify(part)}\n\ndata: [DONE]\n\n`;
}

/**
 * Writes the parts of one AI SDK UI message stream: a text part opened
 * before its first delta and closed before a tool call, and a new step
 * after tool results. The live ui stream and the ui rejoin both write through it.
 */
export class UIParts {
  readonly #writer: SSEWriter;
  /** The open text part's id, if one is open. */
  #textId: string | undefined;
  #parts = 0;
  /** A tool result ended the step: the next text or call begins another. */
  #stepDone = false;

  constructor(writer: SSEWriter) {
    this.#writer = writer;
  }

  start(messageId: string | undefined): void {
    this.#part(messageId === undefined ? { type: 'start' } : { type: 'start', messageId });
    this.#part({ type: 'start-step' });
  }

  text(delta: string): Promise<void> | undefined {
    this.#nextStep();
    if (this.#textId === undefined) {
      this.#textId = `text-${++this.#parts}`;
      this.#part({ type: 'text-start', id: this.#textId });
    }
    return this.#part({ type: 'text-delta', id: this.#textId, delta });
  }

  toolCall(toolCallId: string, toolName: string, input: unknown): Promise<void> | undefined {
    this.#nextStep();
    this.#closeText();
    return this.#part({ type: 'tool-input-available', toolCallId, toolName, input, dynamic: true });
  }

  toolResult(toolCallId: string, result: { output: unknown } | { errorText: string }): Promise<void> | undefined {
    this.#stepDone = true;
    if ('output' in result) return this.#part({ type: 'tool-output-available', toolCallId, output: result.output, dynamic: true });
    return this.#part({ type: 'tool-output-error', toolCallId, errorText: result.errorText, dynamic: true });
  }

  /** Closes the open text and the step: what comes before a `finish` part. */
  finishStep(): void {
    this.#closeText();
    this.#part({ type: 'finish-step' });
  }

  #nextStep(): void {
    if (!this.#stepDone) return;
    this.#stepDone = false;
    this.finishStep();
    this.#part({ type: 'start-step' });
  }

  #closeText(): void {
    if (this.#textId === undefined) return;
    this.#part({ type: 'text-end', id: this.#textId });
    this.#textId = undefined;
  }

  #part(part: Record<string, unknown>): Promise<void> | undefined {
    return this.#writer.send(JSON.stringify(part));
  }
}
