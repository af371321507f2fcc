/**
 * Server-Sent Events framing (WHATWG HTML, "Server-sent events"). Every
 * line break inside a value becomes a new `data:` line, so no chunk or error
 * text can start a field or an event of its own, and a parser rebuilds the
 * value exactly (the parser joins data lines with "\n").
 */
const LINE_BREAK = /\r\n|\r|\n/;

/**
 * One event frame: `event:` and `id:` lines (a line break in either throws), the data lines, a blank line.
 * With `seq`: `id: <id>:<seq>`, `id` a turn id, one line as made, not checked per event (BENCHMARKS.md, "Fixed").
 */
export function formatEvent(data: string, event?: string, id?: string, seq?: number): string {
  let frame = '';
  if (event !== undefined) frame += `event: ${singleLine(event, 'event')}\n`;
  if (id !== undefined) frame += seq === undefined ? `id: ${singleLine(id, 'id')}\n` : `id: ${id}:${seq}\n`;
  if (!hasLineBreak(data)) return `${frame}data: ${data}\n\n`;
  for (const line of data.split(LINE_BREAK)) frame += `data: ${line}\n`;
  return `${frame}\n`;
}

/** A comment frame (`: text`), ignored by parsers; keeps idle connections open. */
export function formatComment(text: string): string {
  return `: ${text.replace(/\r\n|\r|\n/g, ' ')}\n\n`;
}

/** `includes` rather than a regex: it runs for every event's data and id, and costs a third. */
function hasLineBreak(value: string): boolean {
  return value.includes('\n') || value.includes('\r');
}

function singleLine(value: string, field: string): string {
  if (hasLineBreak(value)) throw new TypeError(`SSE ${field} must not contain "\\r" or "\\n"`);
  return value;
}

/** The frame that ends a successful stream. */
export const DONE_FRAME = 'event: done\ndata: [DONE]\n\n';
