import type { IncomingMessage } from 'node:http';
import { httpErrors } from '../errors.ts';
import { mediaType } from './path.ts';

/** Keys that could reach a prototype when user code merges a body into an object. */
const UNSAFE_KEY = /"(?:__proto__|constructor|prototype)"\s*:/;

/**
 * Reads a JSON request body. Refuses a declared non-JSON type (415), a body
 * over `limit` bytes (413: from `content-length` before reading, else while
 * reading), and invalid JSON (400 "Invalid JSON body"). An empty body is `{}`.
 * Keys named `__proto__`, `constructor` and `prototype` are dropped.
 */
export async function readJsonBody(req: IncomingMessage, limit: number): Promise<unknown> {
  checkContentType(req.headers['content-type']);
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) throw httpErrors.payloadTooLarge(limit);
  const text = await readText(req, limit);
  return parseJson(text);
}

/** 415 unless the declared type is JSON (`application/json` or any `+json`); no type at all is taken as JSON. */
export function checkContentType(header: string | undefined): void {
  if (header === undefined || header === '') return;
  const type = mediaType(header);
  if (type === 'application/json' || type.endsWith('+json')) return;
  throw httpErrors.unsupportedMediaType(type);
}

export function parseJson(text: string): unknown {
  if (text.trim() === '') return {};
  try {
    return UNSAFE_KEY.test(text) ? JSON.parse(text, dropUnsafeKeys) : JSON.parse(text);
  } catch {
    throw httpErrors.badRequest('invalid_json', 'Invalid JSON body');
  }
}

function dropUnsafeKeys(key: string, value: unknown): unknown {
  return key === '__proto__' || key === 'constructor' || key === 'prototype' ? undefined : value;
}

function readText(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    if (req.readableEnded) return resolve(''); // someone already read it and left nothing for us
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = (): void => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        // Stop reading: the rest of an oversized upload is not worth receiving.
        req.pause();
        reject(httpErrors.payloadTooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => {
      cleanup();
      resolve(chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8'));
    };
    const onError = (error: Error): void => {
      cleanup();
      reject(error);
    };
    const onClose = (): void => {
      cleanup();
      reject(new Error('client closed the connection before the body was read'));
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}
