/** `Text/Event-Stream; charset=utf-8` -> `text/event-stream`. */
export function mediaType(header: string): string {
  const semicolon = header.indexOf(';');
  return (semicolon === -1 ? header : header.slice(0, semicolon)).trim().toLowerCase();
}
