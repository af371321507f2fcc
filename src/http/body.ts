import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AgentRouterError, httpErrors } from '../errors.ts';
import { parseJson } from '../lib/json.ts';
import { mediaType } from '../lib/media-type.ts';

/**
 * Reads a JSON request body. Refuses a declared non-JSON type (415), a body
 * over `limit` bytes (413: from `content-length` before reading, else while
 * reading), and invalid JSON (400 "Invalid JSON body"). An empty body is `{}`.
 * Keys named `__proto__`, `constructor` and `prototype` are dropped.
 */
export function readJsonBody(req: IncomingMessage, limit: number): Promise<unknown> {
  try {
    checkContentType(req.headers['content-type']);
    checkContentEncoding(req.headers['content-encoding']);
    checkTransferEncoding(req.headers['transfer-encoding']);
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > limit) {
      discardRest(req);
      throw httpErrors.payloadTooLarge(limit);
    }
  } catch (error) {
    return Promise.reject(error);
  }
  continueIfAsked(req);
  return readAndParse(req, limit);
}

/**
 * After a 413, how much more of the upload is read and dropped, and for how
 * long, before the connection is cut. Closing at once resets a connection
 * the client is still writing to, and the reset can reach it before it read
 * the 413: Node's fetch then fails with EPIPE instead of the answer. Reading
 * the rest for a while (what nginx calls a lingering close) lets the client
 * read it; a connection whose whole upload was read stays usable.
 */
const DISCARD_BYTES = 16 * 1024 * 1024;
const DISCARD_MS = 2000;

function discardRest(req: IncomingMessage): void {
  if (req.readableEnded || req.destroyed) return;
  // HTTP/2 resets the one stream (RST_STREAM NO_ERROR) once it is answered, with no connection at stake;
  // reading on, or pausing, would leave it open, its flow-control window shut.
  if (req.httpVersionMajor >= 2) return;
  let left = DISCARD_BYTES;
  const stop = (): void => {
    clearTimeout(timer);
    req.off('data', onData);
    req.off('end', stop);
    req.off('close', stop);
  };
  const cut = (): void => {
    stop();
    req.destroy();
  };
  const onData = (chunk: Buffer): void => {
    left -= chunk.length;
    if (left < 0) cut();
  };
  const timer = setTimeout(cut, DISCARD_MS);
  timer.unref();
  req.on('data', onData);
  req.on('end', stop);
  req.on('close', stop);
  req.resume();
}

/**
 * Requests whose `Expect: 100-continue` AgentServer holds (Node's
 * `checkContinue`): the client waits for `100 Continue` before sending the
 * body, so a request refused on its headers alone (path, type, declared
 * length, authorize) is answered without the body ever being sent. The
 * value is the response's keep-alive, turned off meanwhile: an answer
 * before the 100 closes the connection, since the body the client held back
 * would otherwise be read as the next request (RFC 9110, section 10.1.1).
 */
const heldContinues = new WeakMap<IncomingMessage, { res: ServerResponse; keepAlive: boolean }>();

/** For a `checkContinue` listener: the 100 goes out when the router starts reading the body. */
export function holdContinue(req: IncomingMessage, res: ServerResponse): void {
  heldContinues.set(req, { res, keepAlive: res.shouldKeepAlive });
  res.shouldKeepAlive = false;
}

/** True while AgentServer holds the request's `100 Continue`: its client has sent no body. */
export function awaitingContinue(req: IncomingMessage): boolean {
  return req.headers.expect !== undefined && heldContinues.has(req);
}

function continueIfAsked(req: IncomingMessage): void {
  // Most requests expect nothing: no WeakMap lookup for them.
  if (req.headers.expect === undefined) return;
  const held = heldContinues.get(req);
  if (held === undefined) return;
  heldContinues.delete(req);
  held.res.shouldKeepAlive = held.keepAlive;
  held.res.writeContinue();
}

/**
 * A request that declares a body (a length above 0, or chunked; over
 * HTTP/2, any body its headers did not end the stream before) and no
 * Content-Type: refused unless the router's `strictContentType` is off.
 * From the headers alone, so the body need not be read to refuse it.
 */
export function untypedBody(req: IncomingMessage): boolean {
  const type = req.headers['content-type'];
  if (type !== undefined && type !== '') return false;
  const length = req.headers['content-length'];
  if (length !== undefined) return Number(length) !== 0;
  if (req.httpVersionMajor >= 2) return (req as { stream?: { endAfterHeaders?: boolean } }).stream?.endAfterHeaders !== true;
  return req.headers['transfer-encoding'] !== undefined;
}

/**
 * 415 unless the declared type is JSON (`application/json` or any `+json`);
 * no type at all is taken as JSON (see `untypedBody` for when it is
 * refused before this). A charset other than UTF-8 is refused
 * too: JSON is UTF-8 (RFC 8259), and a body in another would be misread.
 */
export function checkContentType(header: string | undefined): void {
  if (header === undefined || header === '') return;
  const type = mediaType(header);
  if (type !== 'application/json' && !type.endsWith('+json')) throw httpErrors.unsupportedMediaType(type);
  const charset = otherCharset(header);
  if (charset !== undefined) {
    throw new AgentRouterError(415, 'unsupported_media_type', `Charset ${JSON.stringify(charset.slice(0, 40))} is not supported; send JSON as UTF-8`);
  }
}

/** The charset a Content-Type declares when it is not UTF-8 (lower case), else undefined. */
export function otherCharset(header: string): string | undefined {
  if (!header.includes(';')) return undefined;
  const charset = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(header)?.[1]?.toLowerCase();
  return charset === undefined || charset === 'utf-8' || charset === 'utf8' ? undefined : charset;
}

/** 415 for a compressed body (RFC 9110 names Content-Encoding as a 415 cause): it would be read as text. */
function checkContentEncoding(header: string | undefined): void {
  if (header === undefined || header === '' || header.toLowerCase() === 'identity') return;
  throw new AgentRouterError(415, 'unsupported_media_type', `Content-Encoding ${JSON.stringify(header.slice(0, 40))} is not supported; send the body uncompressed`);
}

/**
 * 501 for a transfer coding other than chunked (RFC 9112, section 6.1).
 * Node's parser takes `gzip, chunked` and hands on the bytes still
 * compressed: they would be read as the body. Any other coding alone Node
 * refuses itself (400).
 */
function checkTransferEncoding(header: string | undefined): void {
  // Empty list elements are ignored (RFC 9110, section 5.6.1), as Node's parser does: `, chunked`, or an empty
  // Transfer-Encoding line beside a chunked one (joined as ", chunked"), is chunked alone.
  if (header === undefined || /^[\s,]*chunked[\s,]*$/i.test(header)) return;
  throw new AgentRouterError(501, 'unsupported_transfer_encoding', `Transfer-Encoding ${JSON.stringify(header.slice(0, 40))} is not supported; send the body with chunked alone, or with a Content-Length`, { expose: true });
}

/**
 * A body a host's parser left as raw text (express.raw's Buffer,
 * express.text's string): the router parses it as it parses a body it
 * reads, limit included.
 */
export class JsonText {
  readonly #raw: Buffer | string;
  constructor(raw: Buffer | string) {
    this.#raw = raw;
  }

  /** The parsed body; 413 over `limit` bytes, 400 when not UTF-8 JSON. */
  parse(limit: number): unknown {
    const raw = this.#raw;
    // A hook's stream (Fastify's preParsing) may have stopped reading at the limit, the rest unread.
    if ((typeof raw === 'string' ? Buffer.byteLength(raw) : raw.length) > limit) throw httpErrors.payloadTooLarge(limit, true);
    if (typeof raw !== 'string' && !isUtf8(raw)) throw notUtf8();
    return parseJson(raw.toString());
  }
}

/**
 * True once the HTTP/2 stream under a node:http2 compatibility request or
 * response was closed or reset (the client cancelled it): their own
 * `destroyed` does not tell (the response has none). False over HTTP/1.
 */
export function streamReset(message: IncomingMessage | ServerResponse): boolean {
  return (message as { stream?: { destroyed?: boolean } }).stream?.destroyed === true;
}

function notUtf8(): AgentRouterError {
  return httpErrors.badRequest('invalid_json', 'Invalid JSON body: not valid UTF-8');
}

function bodyAlreadyRead(): AgentRouterError {
  return new AgentRouterError(
    500,
    'body_already_read',
    'AgentRouter: the request body was already read by something before the router, which left no parsed body (req.body) for it; mount the router before that middleware, or parse JSON with express.json() / a body parser',
  );
}

/**
 * The bytes of a body that came in more than one piece, copied into one
 * buffer that doubles as needed, up to the limit. Keeping every piece
 * instead costs an object per piece: a 1 MiB body sent chunked a byte at a
 * time held about 400 MB. (A body in one piece, the usual case, is used as
 * it came, with no copy and no object of this.)
 */
class Pieces {
  readonly #limit: number;
  #bytes: Buffer;
  #used: number;

  constructor(first: Buffer, limit: number) {
    this.#limit = limit;
    this.#bytes = Buffer.allocUnsafe(Math.min(limit, Math.max(first.length * 2, 16 * 1024)));
    first.copy(this.#bytes);
    this.#used = first.length;
  }

  /** Adds a piece; the caller has checked the total against the limit. */
  add(chunk: Buffer): void {
    const needed = this.#used + chunk.length;
    if (needed > this.#bytes.length) {
      const grown = Buffer.allocUnsafe(Math.max(needed, Math.min(this.#limit, this.#bytes.length * 2)));
      this.#bytes.copy(grown, 0, 0, this.#used);
      this.#bytes = grown;
    }
    chunk.copy(this.#bytes, this.#used);
    this.#used = needed;
  }

  get bytes(): Buffer {
    return this.#bytes.subarray(0, this.#used);
  }
}

/** Reads the body and parses it, in the promise it makes: no promise or tick more per request for the parse. */
function readAndParse(req: IncomingMessage, limit: number): Promise<unknown> {
  return new Promise<unknown>((resolve, reject) => {
    // Closed while an async authorize hook ran: no 'close' will come again. 499: nobody to answer, nothing to log.
    // Over HTTP/2 first: node:http2 dumps a reset stream's body, so the request reads as ended.
    if (streamReset(req)) return reject(new AgentRouterError(499, 'client_closed', 'Client closed the stream before the body was read'));
    // Something before the router read the stream (a host middleware): what is left would parse as a client's error.
    // A setup mistake, told to the operator.
    if (req.readableEnded || req.readableDidRead) return reject(bodyAlreadyRead());
    if (req.destroyed) return reject(new AgentRouterError(499, 'client_closed', 'Client closed the connection before the body was read'));
    let first: Buffer | undefined;
    let pieces: Pieces | undefined;
    let size = 0;
    const cleanup = (): void => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    const onData = (data: Buffer | string): void => {
      // Strings when a host middleware set an encoding on the request (req.setEncoding('utf8') in a
      // raw-body logger): back to the bytes they decode, or the reader would throw, taking the process down.
      const chunk = typeof data === 'string' ? Buffer.from(data, req.readableEncoding ?? 'utf8') : data;
      size += chunk.length;
      if (size > limit) {
        cleanup();
        discardRest(req);
        reject(httpErrors.payloadTooLarge(limit));
        return;
      }
      if (first === undefined) {
        first = chunk;
        return;
      }
      pieces ??= new Pieces(first, limit);
      pieces.add(chunk);
    };
    const onEnd = (): void => {
      cleanup();
      const body = pieces?.bytes ?? first ?? Buffer.alloc(0);
      // JSON is UTF-8 (RFC 8259): bytes that are not would reach history as U+FFFD, silently.
      if (!isUtf8(body)) return reject(notUtf8());
      try {
        resolve(parseJson(body.toString('utf8')));
      } catch (error) {
        reject(error);
      }
    };
    const onError = (error: Error): void => {
      cleanup();
      reject(new AgentRouterError(499, 'client_closed', 'Client closed the connection before the body was read', { cause: error }));
    };
    const onClose = (): void => {
      cleanup();
      reject(new AgentRouterError(499, 'client_closed', 'Client closed the connection before the body was read'));
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}
