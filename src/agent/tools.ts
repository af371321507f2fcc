import { AgentRouterError } from '../errors.ts';
import { compileSchema, formatSchemaErrors, type CompiledSchema } from '../lib/json-schema.ts';
import type { JsonObject, JsonValue, ToolCall, ToolDefinition, ToolMessage } from '../types.ts';
import { memberOf, RESERVED } from './actions.ts';
import { assertJson } from '../lib/json.ts';

/** What a tool gets beside its arguments. */
export interface ToolContext {
  agentId: string;
  turnId: string;
  /** Aborted when the turn is cancelled (the client left, a timeout, shutdown): stop the work and throw. */
  signal: AbortSignal;
}

/** `true`: every call waits for a person's decision; a function decides per call, from the parsed arguments. */
export type ToolApproval = boolean | ((args: any) => boolean);

/** A tool a class declares in its static `tools`; the method of the same name runs it with `(args, ctx)`. */
export interface ToolDeclaration {
  /** What the tool does and when to use it: the model reads this to choose. */
  description: string;
  /** A JSON Schema object (`type: "object"`) for the arguments; see src/lib/json-schema.ts for the keywords checked. */
  parameters: { readonly [keyword: string]: unknown };
  /** @defaultValue false */
  approval?: ToolApproval | undefined;
}

/** A tool given in an agent's `tools` option: a declaration with its own `run`. */
export interface ToolOption<A = any> extends ToolDeclaration {
  run(args: A, ctx: ToolContext): unknown;
}

/** The outcome of one call: its result, or an error the model is told of (the turn goes on either way). */
export type ToolOutcome =
  | { result: JsonValue; isError?: undefined; error?: undefined; cause?: undefined }
  | {
      isError: true;
      /** What the model (and the client) sees. */
      error: { message: string; code: string };
      /** What the tool threw, for the log; absent when the call never ran. */
      cause?: unknown;
      result?: undefined;
    };

/** The codes of a call's error result. */
export const TOOL_ERROR_CODES = ['unknown_tool', 'invalid_tool_arguments', 'tool_failed', 'tool_result_not_json'] as const;

/** One checked tool (internal: read through {@link ToolSet}). */
export interface Tool {
  readonly name: string;
  readonly definition: ToolDefinition;
  readonly schema: CompiledSchema;
  readonly approval: ToolApproval;
  /** Runs it on an agent (a class tool's method is called on it; an option's `run` ignores it). */
  readonly call: (instance: object, args: JsonObject, ctx: ToolContext) => unknown;
}

/** An agent's tools, checked once: what the model is told, and how each call runs. */
export class ToolSet {
  readonly #tools: ReadonlyMap<string, Tool>;
  /** What a model is sent (`ModelRequest.tools`), frozen; empty when the agent has no tools. */
  readonly definitions: readonly ToolDefinition[];

  constructor(tools: ReadonlyMap<string, Tool>) {
    this.#tools = tools;
    this.definitions = Object.freeze([...tools.values()].map((tool) => tool.definition));
  }

  get size(): number {
    return this.#tools.size;
  }

  has(name: string): boolean {
    return this.#tools.has(name);
  }

  /**
   * Parses and checks a call's arguments (the JSON text the model wrote;
   * empty text counts as `{}`, as providers send for a tool without
   * parameters). An error outcome goes back to the model as the call's result.
   */
  parse(name: string, rawArguments: string): { args: JsonObject } | ToolOutcome & { isError: true } {
    const tool = this.#tools.get(name);
    if (tool === undefined) return unknownTool(name, [...this.#tools.keys()]);
    let args: unknown;
    try {
      args = rawArguments.trim() === '' ? {} : JSON.parse(rawArguments);
    } catch {
      return failure('invalid_tool_arguments', `The arguments of ${name} are not valid JSON; send one JSON object that matches the tool's parameters`);
    }
    const errors = tool.schema.validate(args);
    if (errors.length > 0) return failure('invalid_tool_arguments', `Invalid arguments for ${name}: ${formatSchemaErrors(errors)}`);
    return { args: args as JsonObject };
  }

  /**
   * Whether a call waits for a person's decision before it runs. Fails
   * closed: an approval function that throws or returns anything but
   * `false` asks. Arguments that do not parse or match never run, so need none.
   */
  needsApproval(name: string, rawArguments: string): boolean {
    const tool = this.#tools.get(name);
    if (tool === undefined || tool.approval === false) return false;
    if (tool.approval === true) return true;
    const parsed = this.parse(name, rawArguments);
    if ('isError' in parsed) return false;
    try {
      return tool.approval(parsed.args) !== false;
    } catch {
      return true;
    }
  }

  /**
   * Runs one call: parses and checks the arguments, runs the tool, checks
   * that the result is JSON (`undefined` is `null`). Never throws: every
   * failure is an error outcome for the model. A thrown error's message is
   * shown only when it is an AgentRouterError marked `expose`; any other
   * error is `cause`, for the caller's log.
   */
  async run(instance: object, name: string, rawArguments: string, ctx: ToolContext): Promise<ToolOutcome> {
    const parsed = this.parse(name, rawArguments);
    if ('isError' in parsed) return parsed;
    const tool = this.#tools.get(name) as Tool;
    let result: unknown;
    try {
      result = await tool.call(instance, parsed.args, ctx);
    } catch (error) {
      if (error instanceof AgentRouterError && error.expose) {
        return { isError: true, error: { message: error.publicMessage ?? error.message, code: error.code }, cause: error };
      }
      return { isError: true, error: { message: `The tool ${name} failed; it gave no details that can be shown`, code: 'tool_failed' }, cause: error };
    }
    if (result === undefined) return { result: null };
    try {
      assertJson(result, `The result of tool ${name}`);
    } catch (error) {
      return { isError: true, error: { message: `The tool ${name} returned a result that is not JSON`, code: 'tool_result_not_json' }, cause: error };
    }
    return { result: result as JsonValue };
  }
}

/**
 * The message that answers `call` in history: a result as text (a string as
 * it is, anything else as JSON), an error as its message, marked `isError`.
 */
export function toolMessage(call: ToolCall, outcome: ToolOutcome): ToolMessage {
  if (outcome.isError === true) return { role: 'tool', toolCallId: call.id, name: call.name, content: outcome.error.message, isError: true };
  const content = typeof outcome.result === 'string' ? outcome.result : JSON.stringify(outcome.result);
  return { role: 'tool', toolCallId: call.id, name: call.name, content };
}

const NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const EMPTY = new ToolSet(new Map());
const byClass = new WeakMap<Function, { tools: ReadonlyMap<string, Tool>; set: ToolSet }>();
const byOptions = new WeakMap<Function, WeakMap<object, ToolSet>>();

/**
 * The tools of an agent: its class's static `tools` (each run by the method
 * of its name) and the `tools` option (each with its own `run`), checked
 * once per class (and per options object). A mistake is a TypeError naming
 * the tool and the fix, thrown when the agent is made, not at the first call.
 *
 * @example class Weather extends Agent { static tools = { forecast: { description: 'Forecast for a city',
 *   parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
 *   async forecast({ city }: { city: string }, { signal }: ToolContext) { ... } }
 */
export function toolsOf(ctor: Function & { tools?: unknown }, optionsTools?: unknown): ToolSet {
  const classTools = classToolsOf(ctor);
  if (optionsTools === undefined) return classTools.set;
  if (typeof optionsTools !== 'object' || optionsTools === null || Array.isArray(optionsTools)) {
    throw new TypeError(`${ctor.name}: the tools option must be an object of tools by name, e.g. { tools: { forecast: { description, parameters, run(args, ctx) {...} } } }`);
  }
  let cache = byOptions.get(ctor);
  const known = cache?.get(optionsTools);
  if (known !== undefined) return known;
  const tools = new Map(classTools.tools);
  for (const name of Object.keys(optionsTools)) {
    const where = `${ctor.name}: the tools option's "${name}"`;
    if (tools.has(name)) throw new TypeError(`${where} is also in ${ctor.name}.tools; give one of them another name`);
    const declaration = (optionsTools as Record<string, unknown>)[name];
    const run = (declaration as { run?: unknown } | null)?.run;
    if (typeof run !== 'function') throw new TypeError(`${where} needs run(args, ctx), the function that does the work`);
    tools.set(name, checkTool(name, declaration, where, true, (_, args, ctx) => (declaration as ToolOption).run(args, ctx)));
  }
  const set = new ToolSet(tools);
  if (cache === undefined) byOptions.set(ctor, (cache = new WeakMap()));
  cache.set(optionsTools, set);
  return set;
}

function classToolsOf(ctor: Function & { tools?: unknown }): { tools: ReadonlyMap<string, Tool>; set: ToolSet } {
  const known = byClass.get(ctor);
  if (known !== undefined) return known;
  const declared = ctor.tools;
  if (declared === undefined) {
    const none = { tools: new Map<string, Tool>(), set: EMPTY };
    byClass.set(ctor, none);
    return none;
  }
  if (typeof declared !== 'object' || declared === null || Array.isArray(declared)) {
    throw new TypeError(`${ctor.name}.tools must be an object of tools by name, e.g. static tools = { forecast: { description, parameters } }`);
  }
  const tools = new Map<string, Tool>();
  for (const name of Object.keys(declared)) {
    const where = `${ctor.name}.tools.${name}`;
    if (RESERVED.has(name)) throw new TypeError(`${where}: "${name}" is a built-in member of every agent; give the tool another name`);
    const member = memberOf(ctor.prototype as object, name);
    const method = member?.value;
    if (typeof method !== 'function') {
      throw new TypeError(`${where}: ${ctor.name} has no method ${name}; add async ${name}(args, ctx) {...} (a class field holding an arrow function is not a method)`);
    }
    tools.set(name, checkTool(name, (declared as Record<string, unknown>)[name], where, false, (instance, args, ctx) => (method as Function).call(instance, args, ctx)));
  }
  const checked = { tools, set: new ToolSet(tools) };
  byClass.set(ctor, checked);
  return checked;
}

const DECLARATION_KEYS = new Set(['description', 'parameters', 'approval']);

function checkTool(name: string, declaration: unknown, where: string, option: boolean, call: Tool['call']): Tool {
  if (!NAME.test(name)) {
    throw new TypeError(`${where}: a tool name must be 1 to 64 letters, digits, _ or - (what both OpenAI and Anthropic accept); rename it, e.g. "${name.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, 64) || 'my_tool'}"`);
  }
  if (typeof declaration !== 'object' || declaration === null || Array.isArray(declaration)) {
    throw new TypeError(`${where} must be { description, parameters${option ? ', run' : ''} }`);
  }
  for (const key of Object.keys(declaration)) {
    if (DECLARATION_KEYS.has(key) || (option && key === 'run')) continue;
    const fix = key === 'run' ? `; a class tool runs as the method ${name}, so drop run` : `; a tool has ${[...DECLARATION_KEYS].join(', ')}${option ? ', run' : ''}`;
    throw new TypeError(`${where}: unknown field ${JSON.stringify(key)}${fix}`);
  }
  const { description, parameters, approval = false } = declaration as Partial<ToolDeclaration>;
  if (typeof description !== 'string' || description.trim() === '') {
    throw new TypeError(`${where}: description must be a non-empty string: the model reads it to decide when to call the tool`);
  }
  if (typeof parameters !== 'object' || parameters === null || Array.isArray(parameters) || parameters['type'] !== 'object') {
    throw new TypeError(`${where}: parameters must be a JSON Schema object with type "object", e.g. { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }`);
  }
  const schema = compileSchema(parameters, `${where}.parameters`);
  try {
    assertJson(parameters, `${where}.parameters`);
  } catch (error) {
    throw new TypeError(`${(error as Error).message}; the schema is sent to the model as JSON`);
  }
  if (typeof approval !== 'boolean' && typeof approval !== 'function') {
    throw new TypeError(`${where}: approval must be true, false, or a function of the arguments returning true when a person must approve the call`);
  }
  // A copy: the model is sent what was checked, whatever later happens to the declaration.
  const definition: ToolDefinition = Object.freeze({ name, description, parameters: JSON.parse(JSON.stringify(parameters)) as JsonObject });
  return { name, definition, schema, approval, call };
}

function failure(code: string, message: string): ToolOutcome & { isError: true } {
  return { isError: true, error: { message, code } };
}

function unknownTool(name: string, known: string[]): ToolOutcome & { isError: true } {
  const list = known.length === 0 ? 'this agent has no tools' : `the tools are ${known.join(', ')}`;
  return failure('unknown_tool', `There is no tool named ${JSON.stringify(name.slice(0, 64))}; ${list}`);
}
