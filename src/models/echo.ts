import type { Model, ModelRequest } from './model.ts';

/**
 * An offline, deterministic model: streams the last user message back word by
 * word (each chunk is a word with the whitespace before it, so the chunks
 * concatenate to the message exactly). The demo's and the tests' default.
 *
 * @example new Agent('echo', { model: echoModel() })
 */
export function echoModel(): Model {
  return {
    name: 'echo',
    async *stream(request: ModelRequest) {
      const last = request.messages[request.messages.length - 1];
      const text = last?.role === 'user' ? last.content : '';
      for (const match of text.matchAll(/\s*\S+|\s+$/g)) {
        if (request.signal.aborted) return;
        yield match[0];
      }
    },
  };
}
