/** What every scenario gets, and the rounds loop they share. */
import { Contender, type Runtime } from '../lib/contender.ts';
import type { Machine } from '../lib/machine.ts';
import type { Settings } from '../lib/settings.ts';
import { sleep } from '../lib/stats.ts';

export interface Context {
  settings: Settings;
  runtime: Runtime;
  machine: Machine;
  log: (line: string) => void;
}

export interface ContenderInfo {
  /** File under contenders/, without extension. */
  file: string;
  label: string;
  /** For "our router inside a framework": the framework's native contender. */
  native?: string | undefined;
}

export const CONTENDERS: Record<string, ContenderInfo> = {
  bare: { file: 'bare', label: 'bare node:http (ceiling)' },
  router: { file: 'router', label: 'AgentRouter, toRequestListener()' },
  server: { file: 'server', label: 'AgentServer' },
  fastify: { file: 'fastify', label: 'Fastify 5, native route' },
  'fastify-router': { file: 'fastify-router', label: 'AgentRouter in Fastify 5', native: 'fastify' },
  express: { file: 'express', label: 'Express 5, native route' },
  'express-router': { file: 'express-router', label: 'AgentRouter in Express 5', native: 'express' },
  koa: { file: 'koa', label: 'Koa 3, native route' },
  'koa-router': { file: 'koa-router', label: 'AgentRouter in Koa 3', native: 'koa' },
};

/** Rows a scenario adds under names of their own: a contender above serving other ids (not in the other scenarios' tables). */
export const VARIANTS: Record<string, ContenderInfo> = {
  /** Scenario 5: the router contender, its streams' model reading the turn's signal. */
  'router-abortable': { file: 'router', label: 'AgentRouter, toRequestListener(), model reading its signal' },
  /** Scenario 1: the router contender, chat served by an agent whose chat() is its own (no turn). */
  'router-no-turn': { file: 'router', label: 'AgentRouter, toRequestListener(), agent with its own chat() (no turn)' },
};

export function label(name: string): string {
  return (CONTENDERS[name] ?? VARIANTS[name])?.label ?? name;
}

/** The contenders/ file a name runs. */
export function fileOf(name: string): string {
  return (CONTENDERS[name] ?? VARIANTS[name])?.file ?? name;
}

/** `names` rotated by `round`, so every contender takes every position in turn (A B C, B C A, ...). */
export function rotate<T>(names: readonly T[], round: number): T[] {
  const shift = round % names.length;
  return [...names.slice(shift), ...names.slice(0, shift)];
}

export interface Outcome<T> {
  samples: T[];
  /** Why the contender has no numbers (could not start, wrong replies, crashed). */
  error?: string | undefined;
}

/**
 * Runs `rounds` rounds: each starts fresh processes of every contender
 * (so no round inherits another's heap or agent history), checks their
 * replies with `verify`, then measures them one after the other in a
 * rotated order, and stops them.
 */
export async function inRounds<T>(
  context: Context,
  names: readonly string[],
  rounds: number,
  verify: (contender: Contender, name: string) => Promise<void>,
  measure: (contender: Contender, round: number, name: string) => Promise<T>,
): Promise<Map<string, Outcome<T>>> {
  const outcomes = new Map<string, Outcome<T>>(names.map((name) => [name, { samples: [] }]));
  for (let round = 0; round < rounds; round++) {
    const started = await Promise.allSettled(names.map((name) => Contender.start(context.runtime, fileOf(name))));
    const live = new Map<string, Contender>();
    started.forEach((result, i) => {
      const name = names[i] as string;
      if (result.status === 'fulfilled') live.set(name, result.value);
      else (outcomes.get(name) as Outcome<T>).error = `not available: ${firstLine(result.reason)}`;
    });
    try {
      for (const name of rotate(names, round)) {
        const contender = live.get(name);
        const outcome = outcomes.get(name) as Outcome<T>;
        if (contender === undefined || outcome.error !== undefined) continue;
        try {
          await verify(contender, name);
          outcome.samples.push(await measure(contender, round, name));
        } catch (error) {
          outcome.error = `failed: ${firstLine(error)}`;
          context.log(`  ${name}: ${outcome.error}${contender.stderr === '' ? '' : `\n${contender.stderr.trim().split('\n').slice(-5).join('\n')}`}`);
        }
      }
    } finally {
      await Promise.all([...live.values()].map((contender) => contender.stop()));
    }
    // Sockets of the stopped contenders linger in TIME_WAIT; a moment lets the next round start clean.
    if (round + 1 < rounds) await sleep(100);
  }
  return outcomes;
}

/**
 * A note per contender that failed after completing some rounds: its row keeps the median of those, and
 * without this the report would not say that it is over fewer rounds than the notes state, nor why.
 */
export function partialNotes<T>(outcomes: Map<string, Outcome<T>>): string[] {
  return [...outcomes].filter(([, outcome]) => outcome.error !== undefined && outcome.samples.length > 0)
    .map(([name, outcome]) => `${label(name)}: ${outcome.error ?? ''} in a later round; its numbers are the median of the ${outcome.samples.length} rounds it completed.`);
}

export function firstLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split('\n')[0] ?? text;
}
