/**
 * The agents every library contender serves, all through the real Agent
 * class: an echo agent (the reply is the message, one chunk) for any id, and
 * by id prefix the streaming shapes of the SSE scenarios. The models are
 * `scriptedModel`s, so no time goes to a model beyond handing over chunks.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent } from '../../../src/agent/agent.ts';
import type { ModelRequest } from '../../../src/models/model.ts';
import { scriptedModel } from '../../../src/models/scripted.ts';
import { AgentRegistry } from '../../../src/registry/registry.ts';
import { ABORTABLE_PREFIX, BURST_PREFIX, NO_TURN_PREFIX, chunkAt, chunkCount, chunksOf, INITIAL_STATE, SLOW_INTERVAL_MS, SLOW_PREFIX, TURN_PREFIX } from '../lib/protocol.ts';

type State = { topic: string };

function lastMessage(request: ModelRequest): string {
  return request.messages[request.messages.length - 1]?.content ?? '';
}

/** Reply = the message, as one chunk. */
const echo = scriptedModel((request) => lastMessage(request));
/** The message's chunks, handed over back to back (no event-loop turn between them). */
const burst = scriptedModel((request) => chunksOf(lastMessage(request)));
/** One chunk per event-loop turn, as a model reading a socket would deliver them. */
const perTurn = scriptedModel((request) => perTurnChunks(lastMessage(request)));
/**
 * One chunk a second (scenario 5's open streams), on a plain timer as the
 * bare server's: cut early, the turn ends at once and the generator at its
 * next tick, within a second.
 */
const slow = scriptedModel((request) => slowChunks(lastMessage(request), undefined));
/**
 * The same, sleeping on the turn's signal as a model that passes it on (to
 * fetch) does: reading `request.signal` makes the turn's AbortController,
 * Node's cost and not the router's, shown in a row of its own.
 */
const abortable = scriptedModel((request) => slowChunks(lastMessage(request), request.signal));

async function* perTurnChunks(message: string): AsyncGenerator<string> {
  let first = true;
  for (const chunk of chunksOf(message)) {
    if (!first) await new Promise(setImmediate);
    first = false;
    yield chunk;
  }
}

async function* slowChunks(message: string, signal: AbortSignal | undefined): AsyncGenerator<string> {
  const count = chunkCount(message);
  for (let i = 0; i < count; i++) {
    if (i > 0) await (signal === undefined ? sleep(SLOW_INTERVAL_MS) : sleep(SLOW_INTERVAL_MS, undefined, { signal }));
    yield chunkAt(message, i);
  }
}

function agentClass(model: ReturnType<typeof scriptedModel>): new (id: string) => Agent<State> {
  return class BenchAgent extends Agent<State> {
    constructor(id: string) {
      super(id, { model, initialState: { ...INITIAL_STATE } });
    }
  };
}

/**
 * An agent whose chat() is its own: the reply is the message, with no turn
 * (no queue, no history, no storage). The router calls an overridden chat()
 * as it is, so serving it is the router's work alone.
 */
class NoTurnAgent extends Agent<State> {
  constructor(id: string) {
    super(id, { initialState: { ...INITIAL_STATE } });
  }

  override chat(message: string): Promise<string> {
    return Promise.resolve(message);
  }
}

/** The registry every library contender serves. */
export function benchRegistry(): AgentRegistry {
  const registry = new AgentRegistry();
  registry.register(`${BURST_PREFIX}.*`, agentClass(burst));
  registry.register(`${TURN_PREFIX}.*`, agentClass(perTurn));
  registry.register(`${SLOW_PREFIX}.*`, agentClass(slow));
  registry.register(`${ABORTABLE_PREFIX}.*`, agentClass(abortable));
  registry.register(`${NO_TURN_PREFIX}.*`, NoTurnAgent);
  registry.register('.*', agentClass(echo));
  return registry;
}

/** Live agents and streams at most, above scenario 5's 10,000 open streams plus probes. */
export const CAPACITY = 25_000;
