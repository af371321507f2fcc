// The npm aliases of Express and Koa ship no types (and @types/express is not
// installed): the tests use them untyped. Fastify ships its own types.
declare module 'express4';
declare module 'express5';
declare module 'koa2';
declare module 'koa3';
declare module 'autocannon';
declare module 'compression';
