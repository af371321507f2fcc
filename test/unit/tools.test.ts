import assert from 'node:assert/strict';
import test from 'node:test';
import { toolMessage, toolsOf, type ToolContext } from '../../src/agent/tools.ts';
import { AgentRouterError } from '../../src/errors.ts';

const CITY = { type: 'object', properties: { city: { type: 'string' }, units: { enum: ['c', 'f'] } }, required: ['city'], additionalProperties: false } as const;
const ctx = (): ToolContext => ({ agentId: 'w-1', turnId: 't-1', signal: new AbortController().signal });

class Weather {
  static tools = {
    forecast: { description: 'The forecast for a city', parameters: CITY },
    transfer: { description: 'Moves money', parameters: { type: 'object', properties: { amount: { type: 'number' } } }, approval: (args: { amount?: number }) => (args.amount ?? 0) > 100 },
    wipe: { description: 'Deletes everything', parameters: { type: 'object' }, approval: true },
    secret: { description: 'Fails with a private message', parameters: { type: 'object' } },
    safe: { description: 'Fails with a message marked safe to show', parameters: { type: 'object' } },
    odd: { description: 'Returns what JSON cannot hold', parameters: { type: 'object' } },
    nothing: { description: 'Returns nothing', parameters: { type: 'object' } },
  };
  readonly prefix = 'sunny in';
  calls: Array<{ args: unknown; ctx: ToolContext }> = [];
  async forecast(args: { city: string }, context: ToolContext) {
    this.calls.push({ args, ctx: context });
    return { summary: `${this.prefix} ${args.city}`, high: 21 };
  }
  transfer() {
    return 'done';
  }
  wipe() {
    return 'wiped';
  }
  secret(): never {
    throw new Error('db password is hunter2');
  }
  safe(): never {
    throw new AgentRouterError(400, 'city_unknown', 'No such city; try a larger one nearby');
  }
  odd() {
    return { when: new Map() };
  }
  nothing() {}
}

test('definitions are what a model is sent: name, description and parameters, in declaration order', () => {
  const tools = toolsOf(Weather);
  assert.equal(tools.size, 7);
  assert.deepEqual(tools.definitions[0], { name: 'forecast', description: 'The forecast for a city', parameters: CITY });
  assert.deepEqual(tools.definitions.map((tool) => tool.name), ['forecast', 'transfer', 'wipe', 'secret', 'safe', 'odd', 'nothing']);
  assert.ok(Object.isFrozen(tools.definitions));
  assert.equal(toolsOf(Weather), tools, 'checked once per class');
});

test('run parses and checks the arguments, then calls the method on the instance with the context', async () => {
  const tools = toolsOf(Weather);
  const agent = new Weather();
  const context = ctx();
  assert.deepEqual(await tools.run(agent, 'forecast', '{"city": "Paris"}', context), { result: { summary: 'sunny in Paris', high: 21 } });
  assert.deepEqual(agent.calls, [{ args: { city: 'Paris' }, ctx: context }]);
  assert.deepEqual(await tools.run(agent, 'transfer', '', context), { result: 'done' }, 'empty arguments are {}');
  assert.deepEqual(await tools.run(agent, 'nothing', '{}', context), { result: null });
});

test('bad JSON, arguments that do not match and unknown tools come back as errors the model can correct', async () => {
  const tools = toolsOf(Weather);
  const agent = new Weather();
  assert.deepEqual(await tools.run(agent, 'forecast', '{"city": "Par', ctx()), {
    isError: true,
    error: { code: 'invalid_tool_arguments', message: "The arguments of forecast are not valid JSON; send one JSON object that matches the tool's parameters" },
  });
  assert.deepEqual(await tools.run(agent, 'forecast', '{"units": "k"}', ctx()), {
    isError: true,
    error: { code: 'invalid_tool_arguments', message: 'Invalid arguments for forecast: arguments.units: must be one of "c", "f"; arguments.city: required' },
  });
  assert.deepEqual(await tools.run(agent, 'forecast', '[]', ctx()), {
    isError: true,
    error: { code: 'invalid_tool_arguments', message: 'Invalid arguments for forecast: arguments: must be an object, got an array' },
  });
  const unknown = await tools.run(agent, 'constructor', '{}', ctx());
  assert.equal(unknown.error?.code, 'unknown_tool');
  assert.match(unknown.error?.message ?? '', /^There is no tool named "constructor"; the tools are forecast, transfer, wipe/);
  assert.equal(agent.calls.length, 0);
});

test('a tool that throws: only an error marked safe to show is shown; any other is generic, with the original kept for the log', async () => {
  const tools = toolsOf(Weather);
  const secret = await tools.run(new Weather(), 'secret', '{}', ctx());
  assert.deepEqual(secret.error, { code: 'tool_failed', message: 'The tool secret failed; it gave no details that can be shown' });
  assert.match(String((secret.cause as Error).message), /hunter2/);
  assert.ok(!JSON.stringify(toolMessage({ id: 'c1', name: 'secret', arguments: '{}' }, secret)).includes('hunter2'));
  const safe = await tools.run(new Weather(), 'safe', '{}', ctx());
  assert.deepEqual(safe.error, { code: 'city_unknown', message: 'No such city; try a larger one nearby' });
  const odd = await tools.run(new Weather(), 'odd', '{}', ctx());
  assert.equal(odd.error?.code, 'tool_result_not_json');
  assert.match(String(odd.cause), /a Map \(key "when"\)/);
});

test('needsApproval: true always asks, a function decides from the arguments, bad arguments need none (they never run)', () => {
  const tools = toolsOf(Weather);
  assert.equal(tools.needsApproval('forecast', '{"city": "Paris"}'), false);
  assert.equal(tools.needsApproval('wipe', '{}'), true);
  assert.equal(tools.needsApproval('transfer', '{"amount": 500}'), true);
  assert.equal(tools.needsApproval('transfer', '{"amount": 5}'), false);
  assert.equal(tools.needsApproval('transfer', '{"amount": "x"}'), false);
  assert.equal(tools.needsApproval('nope', '{}'), false);
  const throwing = toolsOf(Weather, { risky: { description: 'x', parameters: { type: 'object' }, approval: () => { throw new Error('bug'); }, run: () => 1 } });
  assert.equal(throwing.needsApproval('risky', '{}'), true, 'an approval function that throws asks (fails closed)');
});

test('tools from options run their own run(args, ctx), beside the class tools', async () => {
  const options = { add: { description: 'Adds two numbers', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] }, run: ({ a, b }: { a: number; b: number }) => a + b } };
  class Plain {}
  const tools = toolsOf(Plain, options);
  assert.deepEqual(tools.definitions.map((tool) => tool.name), ['add']);
  assert.deepEqual(await tools.run(new Plain(), 'add', '{"a": 2, "b": 3}', ctx()), { result: 5 });
  assert.equal(toolsOf(Plain, options), tools, 'checked once per options object');
  assert.equal(toolsOf(Plain).size, 0);
  const both = toolsOf(Weather, options);
  assert.equal(both.size, 8);
  assert.deepEqual(await both.run(new Weather(), 'add', '{"a": 1, "b": 1}', ctx()), { result: 2 });
});

test('toolMessage: a string result as it is, any other as JSON, an error as its message', () => {
  const call = { id: 'call_1', name: 'forecast', arguments: '{}' };
  assert.deepEqual(toolMessage(call, { result: { high: 21 } }), { role: 'tool', toolCallId: 'call_1', name: 'forecast', content: '{"high":21}' });
  assert.deepEqual(toolMessage(call, { result: 'sunny' }), { role: 'tool', toolCallId: 'call_1', name: 'forecast', content: 'sunny' });
  assert.deepEqual(toolMessage(call, { isError: true, error: { message: 'No', code: 'x' } }), { role: 'tool', toolCallId: 'call_1', name: 'forecast', content: 'No', isError: true });
});

test('a bad declaration throws a TypeError naming the tool and the fix', () => {
  const parameters = { type: 'object' };
  const cases: Array<[() => unknown, RegExp]> = [
    [() => toolsOf(class A { static tools = { 'get weather': { description: 'x', parameters } }; 'get weather'() {} }), /^TypeError: A\.tools\.get weather: a tool name must be 1 to 64 letters, digits, _ or - .*e\.g\. "get_weather"$/],
    [() => toolsOf(class B { static tools = { ['x'.repeat(65)]: { description: 'x', parameters } }; }), /has no method x{65}|a tool name must be 1 to 64/],
    [() => toolsOf(class C { static tools = { forecast: { description: 'x', parameters } }; }), /C\.tools\.forecast: C has no method forecast; add async forecast\(args, ctx\)/],
    [() => toolsOf(class D { static tools = { forecast: { description: 'x', parameters } }; forecast = () => 1; }), /a class field holding an arrow function is not a method/],
    [() => toolsOf(class E { static tools = { chat: { description: 'x', parameters } }; chat() {} }), /E\.tools\.chat: "chat" is a built-in member of every agent; give the tool another name/],
    [() => toolsOf(class F { static tools = { f: { parameters } }; f() {} }), /F\.tools\.f: description must be a non-empty string/],
    [() => toolsOf(class G { static tools = { f: { description: 'x', parameters: { type: 'string' } } }; f() {} }), /G\.tools\.f: parameters must be a JSON Schema object with type "object"/],
    [() => toolsOf(class H { static tools = { f: { description: 'x', parameters: { type: 'object', properties: { a: { type: 'string', pattern: 'x' } } } } }; f() {} }), /H\.tools\.f\.parameters: unknown keyword "pattern".* at \/properties\/a$/],
    [() => toolsOf(class I { static tools = { f: { description: 'x', parameters, approval: 'yes' } }; f() {} }), /I\.tools\.f: approval must be true, false, or a function/],
    [() => toolsOf(class J { static tools = { f: { description: 'x', parameters, run() {} } }; f() {} }), /J\.tools\.f: unknown field "run"; a class tool runs as the method f, so drop run/],
    [() => toolsOf(class K { static tools = { f: { description: 'x', parameter: parameters } }; f() {} }), /K\.tools\.f: unknown field "parameter"; a tool has description, parameters, approval/],
    [() => toolsOf(class L { static tools = ['f']; }), /L\.tools must be an object of tools by name/],
    [() => toolsOf(class M {}, { f: { description: 'x', parameters } }), /M: the tools option's "f" needs run\(args, ctx\)/],
    [() => toolsOf(class N { static tools = { f: { description: 'x', parameters } }; f() {} }, { f: { description: 'x', parameters, run() {} } }), /"f" is also in N\.tools; give one of them another name/],
    [() => toolsOf(class O {}, [{ name: 'f' }]), /the tools option must be an object of tools by name/],
    [() => toolsOf(class P {}, { f: { description: 'x', parameters: { type: 'object', default: () => 1 }, run() {} } }), /parameters is not JSON: it holds a function.*sent to the model as JSON/],
  ];
  for (const [make, message] of cases) assert.throws(make, (error: unknown) => error instanceof TypeError && message.test(String(error)), String(message));
});
