import type { Model, ModelChunk, ModelRequest } from './model.ts';

/** A scripted reply: one string (one chunk) or an array of strings (those chunks). */
export type ScriptedReply = string | readonly string[];
/** Computes a reply from the request: a string, a promise of one, or an async iterable of chunks. */
export type ScriptedFunction = (
  request: ModelRequest,
) => string | Promise<string> | AsyncIterable<ModelChunk> | Iterable<ModelChunk>;

/**
 * An offline model for tests and demos. With an array, the replies are used in
 * turn (after the last one, the model throws, so a test notices an extra turn);
 * with a function, it is called for every turn.
 *
 * @example scriptedModel(['Hello!', ['Two ', 'chunks']])
 * @example scriptedModel(({ messages }) => `you said ${messages.at(-1)?.content}`)
 */
export function scriptedModel(script: readonly ScriptedReply[] | ScriptedFunction): Model {
  if (typeof script !== 'function' && !Array.isArray(script)) {
    throw new TypeError('scriptedModel: pass an array of replies or a function, e.g. scriptedModel(["Hi!"])');
  }
  let turn = 0;
  return {
    name: 'scripted',
    stream(request: ModelRequest): AsyncIterable<ModelChunk> {
      if (typeof script === 'function') {
        const result = script(request);
        // An async iterable (an async generator function's) is the stream itself: no generator wrapped around it,
        // which would cost every chunk a hop and every open stream a suspended frame.
        return isAsyncIterable(result) ? result : chunksOf(result);
      }
      const reply = script[turn++];
      if (reply === undefined) throw new Error(`scriptedModel: the script has only ${script.length} replies`);
      return chunksOf(reply);
    },
  };
}

async function* chunksOf(reply: string | Promise<string> | Iterable<ModelChunk>): AsyncGenerator<ModelChunk> {
  // A string or an array needs no await: the model's own cost is part of every measurement made with it.
  const value = typeof reply === 'string' || Array.isArray(reply) ? reply : await reply;
  if (typeof value === 'string') yield value;
  else for (const chunk of value) yield chunk;
}

function isAsyncIterable(value: unknown): value is AsyncIterable<ModelChunk> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}
