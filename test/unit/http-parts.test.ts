import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkContentType } from '../../src/http/body.ts';
import { parseJson } from '../../src/lib/json.ts';
import { decodeAgentId, parseStreamFlag, queryParam, splitTarget } from '../../src/http/path.ts';
import { matchRegistry, matchSingle, normalizePrefix, stripPrefix } from '../../src/router/routes.ts';
import { formatComment, formatEvent } from '../../src/sse/format.ts';
import { AgentRouterError, errorBody } from '../../src/errors.ts';

test('splitTarget and queryParam read the query without new URL()', () => {
  assert.deepEqual(splitTarget('/a/chat?stream=true&x=1'), { path: '/a/chat', query: 'stream=true&x=1' });
  assert.deepEqual(splitTarget('/a'), { path: '/a', query: '' });
  assert.equal(queryParam('x=1&stream=yes', 'stream'), 'yes');
  assert.equal(queryParam('stream', 'stream'), '');
  assert.equal(queryParam('streaming=1', 'stream'), undefined);
  assert.equal(queryParam('stream=a+b%21', 'stream'), 'a b!');
  assert.throws(() => queryParam('stream=%E0%A4', 'stream'), { code: 'bad_query' });
});

test('decodeAgentId decodes once and refuses what no id may be', () => {
  assert.equal(decodeAgentId('plain-id', 256), 'plain-id');
  assert.equal(decodeAgentId('%2541', 256), '%41');
  assert.equal(decodeAgentId('%F0%9F%A4%96', 256), '🤖');
  // The limit counts characters (code points), not UTF-16 units: 256 emoji pass, 257 do not.
  assert.equal(decodeAgentId('🤖'.repeat(256), 256).length, 512);
  assert.throws(() => decodeAgentId('🤖'.repeat(257), 256), /longer than 256 characters/);
  assert.equal(splitTarget('http://agents.example/a/state?x=1').path, '/a/state');
  assert.equal(splitTarget('HTTPS://h:8080?q').path, '/');
  for (const bad of ['', '.', '..', '%2e', '%2E%2e', 'a%2fb', '%0a', '%C2%85', '%ZZ', 'x'.repeat(9)]) {
    assert.throws(() => decodeAgentId(bad, 8), { code: 'bad_agent_id', status: 400 }, bad);
  }
});

test('parseStreamFlag follows DESIGN.md section 3', () => {
  for (const on of ['true', '1', 'yes', 'on', 'TRUE', 'Yes']) assert.equal(parseStreamFlag(on, undefined), true, on);
  for (const off of ['false', '0', 'no', 'off', 'OFF']) assert.equal(parseStreamFlag(off, 'text/event-stream'), false, off);
  // Present with no value (`?stream`, `?stream=`): as if absent, Accept decides.
  assert.equal(parseStreamFlag('', 'text/event-stream'), true);
  assert.equal(parseStreamFlag('', undefined), false);
  assert.equal(parseStreamFlag('events', undefined), 'events');
  assert.equal(parseStreamFlag(undefined, 'text/event-stream'), true);
  assert.equal(parseStreamFlag(undefined, 'Text/Event-Stream; charset=utf-8'), true);
  assert.equal(parseStreamFlag(undefined, 'text/event-stream, application/json'), false);
  assert.equal(parseStreamFlag(undefined, '*/*'), false);
  assert.equal(parseStreamFlag(undefined, undefined), false);
  assert.throws(() => parseStreamFlag('2', undefined), { code: 'bad_query' });
});

test('route matching for single and registry routers', () => {
  assert.equal(matchSingle('/chat')?.action, 'chat');
  assert.equal(matchSingle('')?.action, 'request');
  assert.equal(matchSingle('/constructor'), undefined);
  assert.deepEqual(matchRegistry('/a%20b/state'), { action: 'state', segment: 'a%20b', method: 'GET' });
  assert.equal(matchRegistry('/a/chat/')?.action, 'chat');
  assert.equal(matchRegistry('/a/')?.action, 'request');
  assert.equal(matchRegistry('/'), undefined);
  assert.equal(matchRegistry('a/chat'), undefined);
  assert.equal(matchRegistry('/a/b/chat'), undefined);
  assert.equal(normalizePrefix('agents/'), '/agents');
  assert.equal(normalizePrefix('/'), '');
  assert.equal(stripPrefix('/agents/x', '/agents'), '/x');
  assert.equal(stripPrefix('/agentsx', '/agents'), undefined);
  assert.equal(stripPrefix('/other', '/agents'), undefined);
});

test('content type: JSON and +json accepted, none taken as JSON, others refused', () => {
  checkContentType(undefined);
  checkContentType('application/json; charset=utf-8');
  checkContentType('application/vnd.api+json');
  assert.throws(() => checkContentType('text/plain'), { status: 415, message: /send JSON/ });
  assert.throws(() => checkContentType('application/x-www-form-urlencoded'), { status: 415 });
});

test('parseJson: empty is {}, invalid is the spec error, prototype keys dropped at any depth', () => {
  assert.deepEqual(parseJson('  '), {});
  assert.throws(() => parseJson('{'), { status: 400, message: 'Invalid JSON body', code: 'invalid_json' });
  const parsed = parseJson('{"a":{"__proto__":{"x":1},"b":[{"constructor":1,"c":2}]},"prototype":3}') as Record<string, any>;
  assert.deepEqual(parsed, { a: { b: [{ c: 2 }] } });
  assert.equal(Object.getPrototypeOf(parsed['a']), Object.prototype);
});

test('formatEvent splits every line break into its own data line', () => {
  assert.equal(formatEvent('one'), 'data: one\n\n');
  assert.equal(formatEvent('a\nb\r\nc\rd'), 'data: a\ndata: b\ndata: c\ndata: d\n\n');
  assert.equal(formatEvent('{}', 'error'), 'event: error\ndata: {}\n\n');
  assert.equal(formatEvent('x', 'e', '1'), 'event: e\nid: 1\ndata: x\n\n');
  assert.throws(() => formatEvent('x', 'bad\nevent'), /must not contain/);
  assert.equal(formatComment('a\nb'), ': a b\n\n');
});

test('errorBody exposes 4xx messages and hides 5xx details', () => {
  assert.deepEqual(errorBody(new AgentRouterError(404, 'x', 'shown')), { error: 'shown', code: 'x' });
  assert.deepEqual(errorBody(new Error('secret')), { error: 'Internal error', code: 'internal_error' });
  assert.deepEqual(errorBody(new AgentRouterError(500, 'x', 'secret')), { error: 'Internal error', code: 'internal_error' });
  assert.deepEqual(errorBody(new AgentRouterError(502, 'bad_gateway', 'hidden', { expose: false })), { error: 'Request failed', code: 'bad_gateway' });
  assert.deepEqual(errorBody(new AgentRouterError(502, 'bad_gateway', 'remote http://b/ failed', { expose: true })), { error: 'remote http://b/ failed', code: 'bad_gateway' });
});
