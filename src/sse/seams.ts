/**
 * What a chunk boundary can split that two plain SSE events cannot carry:
 * a UTF-16 surrogate pair (each lone half would go out as U+FFFD, so an
 * emoji a model sliced by UTF-16 index arrived as two replacement
 * characters) and a CRLF (the "\r" ends the first event's last line, and
 * the "\n" would open the next event with an empty line: one line break
 * read as two). The typed stream needs none of this: JSON escapes both.
 */
export class ChunkSeam {
  /** A high surrogate held back for the next chunk. */
  #held = '';
  /** The text last sent ended with "\r": a "\n" opening the next is the second half of its CRLF. */
  #afterCR = false;

  /** Whether `text` ends where a seam must be watched: so a stream makes a ChunkSeam only when one is. */
  static needed(text: string): boolean {
    const last = text.charCodeAt(text.length - 1);
    return last === 0x0d || isHighSurrogate(last);
  }

  /** A high surrogate is held back: the reply ending now must send it with `next('')`. */
  get holding(): boolean {
    return this.#held !== '';
  }

  /** The text to send for the model's `text`: '' when there is nothing to send yet. An empty `text` sends what is held. */
  next(text: string): string {
    if (text === '') return this.#flush();
    let out = this.#held === '' ? text : this.#held + text;
    this.#held = '';
    if (this.#afterCR && out.charCodeAt(0) === 0x0a) out = out.slice(1);
    if (isHighSurrogate(out.charCodeAt(out.length - 1))) {
      this.#held = out.slice(-1);
      out = out.slice(0, -1);
    }
    this.#afterCR = out.charCodeAt(out.length - 1) === 0x0d;
    return out;
  }

  #flush(): string {
    const held = this.#held;
    this.#held = '';
    if (held !== '') this.#afterCR = false;
    return held;
  }
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
