/**
 * Express 5 and Koa 3 (npm aliases `express5`, `koa3`) ship no types and
 * the library may not depend on them: they are loaded untyped, through the
 * few members the contenders use.
 */
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';

export interface ExpressRequest extends IncomingMessage {
  params: Record<string, string>;
  body?: unknown;
}
export interface ExpressResponse extends ServerResponse {
  json(body: unknown): void;
  status(code: number): ExpressResponse;
}
type ExpressHandler = (req: ExpressRequest, res: ExpressResponse, next: (error?: unknown) => void) => void;
export interface ExpressApp extends RequestListener {
  use(handler: unknown): void;
  post(path: string, handler: ExpressHandler): void;
  get(path: string, handler: ExpressHandler): void;
}
export interface ExpressModule {
  (): ExpressApp;
  json(): unknown;
}

export interface KoaContext {
  req: IncomingMessage;
  res: ServerResponse;
  method: string;
  path: string;
  url: string;
  status: number;
  body: unknown;
  request: { body?: unknown };
  respond?: boolean | undefined;
}
export interface KoaApp {
  use(middleware: (ctx: KoaContext, next: () => Promise<unknown>) => unknown): KoaApp;
  callback(): RequestListener;
}

/** Imports a package the type checker knows nothing about. */
async function untyped<T>(name: string): Promise<T> {
  const module = (await import(name)) as { default?: T };
  return (module.default ?? module) as T;
}

export const loadExpress = (): Promise<ExpressModule> => untyped<ExpressModule>('express5');
export const loadKoa = (): Promise<new () => KoaApp> => untyped<new () => KoaApp>('koa3');
export const loadKoaBodyParser = async (): Promise<() => (ctx: KoaContext, next: () => Promise<unknown>) => unknown> => {
  const module = (await import('@koa/bodyparser' as string)) as { bodyParser: () => (ctx: KoaContext, next: () => Promise<unknown>) => unknown };
  return module.bodyParser;
};
