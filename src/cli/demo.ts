import { Agent } from '../agent/agent.ts';
import { AgentRouterError } from '../errors.ts';
import { echoModel } from '../models/echo.ts';
import type { Model, ModelRequest } from '../models/model.ts';
import { scriptedModel, type ScriptedReply } from '../models/scripted.ts';
import { AgentRegistry } from '../registry/registry.ts';
import type { Storage } from '../storage/storage.ts';

export interface DemoOptions {
  storage: Storage;
  /** The model of the `chat-*` agents. @defaultValue echoModel() */
  chatModel?: Model | undefined;
}

/**
 * The registry `agent-router serve` runs without a module: `echo-*` agents
 * (the offline echo model), `chat-*` agents (a real model when an API key is
 * set, echo otherwise), `counter-*` agents with an `increment` action, and
 * `calc-*` agents whose scripted model calls a calculator and a clock tool.
 */
export function demoRegistry(options: DemoOptions): AgentRegistry {
  const { storage } = options;
  const chatModel = options.chatModel ?? echoModel();

  class EchoAgent extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel(), storage });
    }
  }

  class ChatAgent extends Agent {
    constructor(id: string) {
      super(id, { model: chatModel, storage, system: 'You are a concise, helpful assistant.' });
    }
  }

  class CounterAgent extends Agent<{ count: number }> {
    static override actions = ['increment'];
    constructor(id: string) {
      super(id, { model: echoModel(), storage, initialState: { count: 0 } });
    }

    /** Adds `by` (default 1) to the count and returns the new count. */
    async increment(params: { by?: unknown } | number = {}): Promise<number> {
      const by = typeof params === 'number' ? params : (params.by ?? 1);
      if (typeof by !== 'number' || !Number.isFinite(by)) {
        throw new AgentRouterError(400, 'invalid_params', 'increment takes {"by": <number>}, e.g. {"method": "increment", "params": {"by": 2}}');
      }
      await this.setState({ count: this.state.count + by });
      return this.state.count;
    }
  }

  class CalcAgent extends Agent {
    static override tools = {
      calculate: {
        description: 'Applies + - * or / to two numbers',
        parameters: {
          type: 'object',
          properties: { a: { type: 'number' }, op: { enum: ['+', '-', '*', '/'] }, b: { type: 'number' } },
          required: ['a', 'op', 'b'],
          additionalProperties: false,
        },
      },
      now: { description: 'The current date and time (UTC)', parameters: { type: 'object', properties: {}, additionalProperties: false } },
    };
    constructor(id: string) {
      super(id, { model: scriptedModel(calcReply), storage });
    }

    calculate({ a, op, b }: { a: number; op: '+' | '-' | '*' | '/'; b: number }): number {
      if (op === '/' && b === 0) throw new AgentRouterError(400, 'division_by_zero', 'Cannot divide by zero');
      return op === '+' ? a + b : op === '-' ? a - b : op === '*' ? a * b : a / b;
    }

    now(): string {
      return new Date().toISOString();
    }
  }

  const registry = new AgentRegistry();
  registry.register('calc-.*', CalcAgent);
  registry.register('echo-.*', EchoAgent);
  registry.register('chat-.*', ChatAgent);
  registry.register('counter-.*', CounterAgent);
  return registry;
}

const SUM = /(-?\d+(?:\.\d+)?)\s*([-+*/])\s*(-?\d+(?:\.\d+)?)/;

/** The calc agents' model: a sum in the message calls calculate, "time" calls now, and a tool's answer is read back. */
function calcReply(request: ModelRequest): ScriptedReply {
  const last = request.messages.at(-1);
  if (last?.role === 'tool') return last.isError === true ? `The ${last.name} tool said: ${last.content}` : last.name === 'now' ? `It is ${last.content} (UTC).` : `The answer is ${last.content}.`;
  const text = last?.content ?? '';
  const sum = SUM.exec(text);
  if (sum !== null) return { text: 'Let me calculate that. ', toolCalls: [{ name: 'calculate', arguments: { a: Number(sum[1]), op: sum[2], b: Number(sum[3]) } }] };
  if (/\btime\b|\bdate\b/i.test(text)) return { toolCalls: [{ name: 'now' }] };
  return 'Ask me a sum such as "2+3", or the time.';
}

/** What the demo prints once it listens: the agents, where they live, and curl lines to paste. */
export function demoBanner(url: string, storage: string, chatModel: string, playground = false): string {
  const json = "-H 'content-type: application/json'";
  return [
    '',
    'Demo agents (any id after the dash works):',
    '  echo-*     echoes your message back, word by word (offline)',
    `  chat-*     a chat agent on ${chatModel}`,
    '  counter-*  keeps a count; action: increment {"by": n}',
    '  calc-*     calls a calculator or a clock tool (scripted model, offline)',
    `Storage: ${storage}`,
    ...(playground ? [`Playground: ${url}/playground (open it in a browser)`] : []),
    '',
    'Try:',
    `  curl '${url}/agent/echo-1/chat' ${json} -d '{"message": "Hello, agent"}'`,
    `  curl -N '${url}/agent/echo-1/chat?stream=true' ${json} -d '{"message": "Stream these words"}'`,
    `  curl '${url}/agent/counter-1/invoke' ${json} -d '{"method": "increment", "params": {"by": 2}}'`,
    `  curl '${url}/agent/calc-1/chat' ${json} -d '{"message": "What is 2+3?"}'`,
    `  curl '${url}/agent/counter-1/state'`,
    `  curl '${url}/healthz'`,
    '',
    'Ctrl-C stops the server (running turns get to finish).',
    '',
  ].join('\n');
}
