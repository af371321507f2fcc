import type { Model, ModelChunk, ModelRequest } from './model.ts';

/** A tool call in a script: `arguments` as an object (sent as its JSON) or as the JSON text itself (to script bad JSON); `id` made when absent. */
export interface ScriptedToolCall {
  name: string;
  arguments?: Readonly<Record<string, unknown>> | string | undefined;
  id?: string | undefined;
}

/** A step that calls tools: optional text first (one chunk or several), then the calls. */
export interface ScriptedStep {
  text?: string | readonly string[] | undefined;
  toolCalls: readonly ScriptedToolCall[];
}

/** A scripted reply: one string (one chunk), an array of strings (those chunks), or a step that calls tools. */
export type ScriptedReply = string | readonly string[] | ScriptedStep;
/** Computes a reply from the request (which holds the tool results so far): a string, a promise of one, a step, or an (async) iterable of chunks. */
export type ScriptedFunction = (
  request: ModelRequest,
) => string | Promise<string | ScriptedStep> | ScriptedStep | AsyncIterable<ModelChunk> | Iterable<ModelChunk>;

/**
 * An offline model for tests and demos. With an array, the replies are used in
 * turn, one per call of the model (each step of a tool turn is a call; after
 * the last reply, the model throws, so a test notices an extra call); with a
 * function, it is called for every step.
 *
 * @example scriptedModel(['Hello!', ['Two ', 'chunks']])
 * @example scriptedModel([{ toolCalls: [{ name: 'add', arguments: { a: 2, b: 3 } }] }, 'It is 5.'])
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
      const step = turn++;
      if (typeof script === 'function') {
        const result = script(request);
        // An async iterable (an async generator function's) is the stream itself: no generator wrapped around it,
        // which would cost every chunk a hop and every open stream a suspended frame.
        return isAsyncIterable(result) ? result : chunksOf(result, step);
      }
      const reply = script[step];
      if (reply === undefined) throw new Error(`scriptedModel: the script has only ${script.length} replies`);
      return chunksOf(reply, step);
    },
  };
}

async function* chunksOf(reply: ScriptedReply | Promise<string | ScriptedStep> | Iterable<ModelChunk>, step: number): AsyncGenerator<ModelChunk> {
  // A string or an array needs no await: the model's own cost is part of every measurement made with it.
  const value = typeof reply === 'string' || Array.isArray(reply) ? reply : await reply;
  if (typeof value === 'string') yield value;
  else if (isStep(value)) yield* stepChunks(value, step);
  else for (const chunk of value as Iterable<ModelChunk>) yield chunk;
}

function* stepChunks(step: ScriptedStep, index: number): Generator<ModelChunk> {
  if (typeof step.text === 'string') {
    if (step.text !== '') yield step.text;
  } else if (step.text !== undefined) yield* step.text;
  for (const [i, call] of step.toolCalls.entries()) {
    if (typeof call?.name !== 'string') throw new TypeError('scriptedModel: each scripted tool call needs a name, e.g. { name: "add", arguments: { a: 1 } }');
    const args = call.arguments === undefined ? '{}' : typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments);
    yield { toolCall: { id: call.id ?? `call_${index}_${i}`, name: call.name, arguments: args } };
  }
}

function isStep(value: unknown): value is ScriptedStep {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && Array.isArray((value as { toolCalls?: unknown }).toolCalls);
}

function isAsyncIterable(value: unknown): value is AsyncIterable<ModelChunk> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}
