/**
 * The FileStorage journal format: one agent per file, JSON lines, one line
 * per commit, appended and never rewritten in place.
 *
 *   {"id":"bob","v":1,"state":{...},"append":[...]}   first line: the id, then the first commit
 *   {"v":2,"state":{...},"append":[...]}              one line per later commit
 *   {"id":"bob","v":7,"state":{...},"messages":[...]} first line of a compacted file
 *
 * (The built-in storages start a record at a random version, not 1: see
 * record-version.ts. A journal written before that starts at 1 and reads the same.)
 *
 * A crash mid-append leaves a torn last line (no newline, or bytes that do
 * not parse); it is dropped on load and cut off before the next append. A
 * bad line anywhere else is corruption and is reported, never skipped. A
 * line whose version does not follow the one before is a write from a
 * writer that lost its lease; it is ignored, so the first write of each
 * version wins and every reader agrees on it.
 */
import { AgentRouterError } from '../errors.ts';
import { isMessage } from './check.ts';
import type { ChatMessage, JsonObject } from '../types.ts';

/** What a writer needs to know about a journal, without its history. */
export interface JournalView {
  version: number;
  /** Bytes up to the end of the last valid line; anything after it is a torn tail. */
  validBytes: number;
  /**
   * Bytes of the last line but its messages (its state, version and JSON
   * framing): stale once another commit follows. Counting only the state
   * left a small state's lines (mostly framing) never worth compacting.
   */
  stateBytes: number;
  /** Bytes of superseded states and ignored lines: what compaction reclaims. */
  staleBytes: number;
}

export interface ParsedJournal extends JournalView {
  state: JsonObject;
  messages: ChatMessage[];
}

interface Line {
  id?: unknown;
  v: number;
  state: JsonObject;
  append?: ChatMessage[];
  messages?: ChatMessage[];
}

export const EMPTY_VIEW: JournalView = { version: 0, validBytes: 0, stateBytes: 0, staleBytes: 0 };

const NEWLINE = 0x0a;

/**
 * Reads journal lines from `bytes`, which start at byte `offset` of the file
 * (0: the whole file; otherwise the bytes after `from.validBytes`). With
 * `collect`, also rebuilds state and history (a full read must start at 0).
 * Returns `undefined` when a tail read meets a line it cannot take (the file
 * was compacted or rewritten under the caller), which must then read it whole.
 */
export function scanJournal(bytes: Buffer, options: {
  agentId: string;
  file: string;
  from?: JournalView | undefined;
  collect?: boolean | undefined;
}): ParsedJournal | undefined {
  const from = options.from ?? EMPTY_VIEW;
  const offset = from.validBytes;
  const view: ParsedJournal = { ...from, state: {}, messages: [] };
  let start = 0;
  let lineNumber = 0;
  while (start < bytes.length) {
    const end = bytes.indexOf(NEWLINE, start);
    if (end < 0) break; // torn tail: a write that never finished
    lineNumber++;
    const line = parseLine(bytes.toString('utf8', start, end));
    const atFileStart = offset + start === 0;
    if (line === undefined || (atFileStart && line.id !== options.agentId) || (!atFileStart && (line.id !== undefined || line.messages !== undefined))) {
      // A last line holding NUL bytes is a torn write (a crash left its start's blocks unwritten). Any other bad line,
      // the last one too, is corruption: a complete line was an acknowledged turn.
      if (line === undefined && bytes.indexOf(NEWLINE, end + 1) < 0 && bytes.subarray(start, end).includes(0)) break;
      // A tail read is told to read the whole file instead, which reports real damage: the tail may start mid-line, in a
      // file compacted under the caller, or after a line a failed commit took back.
      if (offset > 0) return undefined;
      throw corrupt(options.file, lineNumber);
    }
    const lineBytes = end + 1 - start;
    start = end + 1;
    view.validBytes = offset + start;
    // A journal's first line starts the record at any version (record-version.ts); each later one follows.
    if (line.messages === undefined && !atFileStart && line.v !== view.version + 1) {
      view.staleBytes += lineBytes; // a fenced-out writer's line: ignored, reclaimed by compaction
      continue;
    }
    view.staleBytes += view.stateBytes;
    view.stateBytes = lineBytes - messagesBytes(line.append ?? line.messages ?? []);
    view.version = line.v;
    if (options.collect === true) {
      view.state = line.state;
      if (line.messages !== undefined) view.messages = line.messages;
      else for (const message of line.append ?? []) view.messages.push(message);
    }
  }
  return view;
}

/**
 * One commit as a journal line; the file's first line also names the id it
 * belongs to. `stateJson` is the state already serialized (its size feeds
 * the compaction accounting). JSON.stringify escapes every newline inside
 * strings, so a line never holds a raw newline byte.
 */
export function commitLine(agentId: string | undefined, v: number, stateJson: string, append: readonly ChatMessage[]): string {
  const id = agentId === undefined ? '' : `"id":${JSON.stringify(agentId)},`;
  return `{${id}"v":${v},"state":${stateJson},"append":${JSON.stringify(append)}}\n`;
}

/** The single line of a freshly compacted journal. */
export function snapshotLine(agentId: string, journal: ParsedJournal): string {
  return `${JSON.stringify({ id: agentId, v: journal.version, state: journal.state, messages: journal.messages })}\n`;
}

function parseLine(text: string): Line | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const line = value as Record<string, unknown>;
  const { v, state, append, messages } = line as { v?: unknown; state?: unknown; append?: unknown; messages?: unknown };
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) return undefined;
  if (typeof state !== 'object' || state === null || Array.isArray(state)) return undefined;
  if (Array.isArray(append) === Array.isArray(messages)) return undefined;
  if (!((append ?? messages) as unknown[]).every(isMessage)) return undefined;
  return line as unknown as Line;
}


function corrupt(file: string, lineNumber: number): AgentRouterError {
  return new AgentRouterError(
    500,
    'storage_corrupt',
    `FileStorage: ${file} line ${lineNumber} is damaged or not a journal entry of this agent; move the file aside or repair that line`,
  );
}

/** The bytes a line's messages take in it (what compaction keeps of a superseded line). */
export function messagesBytes(messages: readonly ChatMessage[]): number {
  return Buffer.byteLength(JSON.stringify(messages));
}
