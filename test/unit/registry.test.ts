import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { AgentNotFoundError } from '../../src/errors.ts';
import { echoModel } from '../../src/models/echo.ts';
import { canBacktrackBadly } from '../../src/registry/patterns.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import type { AgentTransport } from '../../src/transports/transport.ts';

class Worker extends Agent {
  constructor(id: string) {
    super(id, { model: echoModel() });
  }
}
class Other extends Agent {}

const remote: AgentTransport = {
  chat: async () => '',
  stream: () => Object.assign((async function* () {})(), { ready: Promise.resolve() }),
  invoke: async () => null,
  state: async () => ({}),
};

test('every pattern matches the whole id, simple or not', () => {
  const registry = new AgentRegistry();
  registry.register('worker-[0-9]+', Worker);
  registry.register('exact', Other);
  assert.equal(registry.resolve('worker-12'), Worker);
  for (const id of ['worker-1x', 'worker-1/../../admin', 'xworker-1', 'exact\n', 'exactly', 'an-exact']) {
    assert.throws(() => registry.resolve(id), AgentNotFoundError, id);
  }
  assert.equal(registry.resolve('exact'), Other);
});

test('a string pattern\'s dot matches any character: .* is a true catch-all', () => {
  const registry = new AgentRegistry();
  registry.register('.*', Other);
  for (const id of ['a\u2028b', 'a\u2029b', 'plain']) assert.equal(registry.resolve(id), Other, JSON.stringify(id));
});

test('a RegExp pattern is anchored too, and stateful or multiline flags cannot loosen it', () => {
  const registry = new AgentRegistry();
  registry.register(/team-[a-z]+/gmi, Worker);
  assert.equal(registry.resolve('team-ABC'), Worker);
  assert.equal(registry.resolve('team-abc'), Worker); // g would make a second test() fail
  assert.throws(() => registry.resolve('x\nteam-abc'), AgentNotFoundError);
});

test('the first registered match wins and _routes keeps registration order', () => {
  const registry = new AgentRegistry();
  registry.register('remote-.*', remote);
  registry.register('.*', Worker);
  assert.equal(registry.resolve('remote-7'), remote);
  assert.equal(registry.resolve('anything'), Worker);
  assert.deepEqual(registry._routes.map(([pattern]) => pattern), ['remote-.*', '.*']);
  assert.equal(registry._routes[0]?.[1], remote);
  // A copy: emptying it used to leave resolve() reading routes that were gone (a raw TypeError).
  registry._routes.length = 0;
  assert.equal(registry.resolve('remote-8'), remote);
  assert.equal(registry._routes.length, 2);
});

test('resolve throws AgentNotFoundError naming the id', () => {
  const registry = new AgentRegistry();
  assert.throws(() => registry.resolve('ghost'), (error: unknown) => {
    assert.ok(error instanceof AgentNotFoundError);
    assert.equal(error.status, 404);
    assert.equal(error.agentId, 'ghost');
    assert.match(error.message, /no pattern matches agent id "ghost"/);
    return true;
  });
});

test('a pattern that does not compile throws at register, naming it', () => {
  const registry = new AgentRegistry();
  assert.throws(() => registry.register('worker-[0-9', Worker), /pattern worker-\[0-9 does not compile/);
  assert.equal(registry._routes.length, 0);
});

test('nested quantifiers are refused unless the caller opts out', () => {
  const registry = new AgentRegistry();
  assert.throws(() => registry.register('(a+)+', Worker), /backtrack catastrophically/);
  assert.throws(() => registry.register(/(x*y?)*z/, Worker), /allowBacktracking/);
  registry.register('(a+)+', Worker, { allowBacktracking: true });
  assert.equal(registry.resolve('aaa'), Worker);
});

test('canBacktrackBadly finds the dangerous shapes and leaves common ones alone', () => {
  const dangerous = [
    '(a+)+', '(\\d*x?)*', '(?:a{2,})+', '((ab)+c)*', '(a|b+){2,5}',
    // alternatives under a quantifier that can match the same text more than one way
    '(a|a)*', '(a|ab)*', '(\\w|\\d)+', '((a|a)b)*', '(?:x|X)+', '(?<n>a|ab)+', '(.|a)*',
    // an optional part inside a repeated group: each repeat may match nothing, or the same text two ways
    '(?:a?a?)+', 'x-(?:a?a?)+', 'user-(?:[a-z0-9]?[a-z0-9]?)+', '(?:a{0,1}b?)*',
    // three unbounded repeats that share characters: n^3 steps and up on a failing id
    'org-.*-.*-.*-bot', '\\d+\\d+\\d+', 'a*a*a*a*b', 'user-[a-z0-9-]+-[a-z0-9-]+-[a-z0-9-]+-x', '.*x.*y.*',
    '[a-z]{1,100}[a-z]{1,100}[a-z]{1,100}', '(?:.b)+-.*-.*', '\\w+\\S+.+', '(.*)-(.*)-(.*)', '.*[-_].*[-_].*',
    // separators as alternatives inside a group, and bounded repeats whose ranges multiply
    '[\\w-]*(?:-|_)[\\w-]*(?:-|_)[\\w-]*(?:-|_)[\\w-]*', '.*(?:-|_).*(?:-|_).*', '.{0,31}-.{0,31}-.{0,31}-.{0,31}-.{0,31}-.{0,31}',
    '.*(?:-x)?.*(?:-x)?.*', '(?:a?b?a)+',
    // found by a bounded random search (up to 27 s on a 200-character id): repeats inside an optional group stay in the row
    '\\S+?(?:(?:a|b)+?.+)?a(?:(?:(?:a|b)?[^-][-_]{0,31}a*[a-z0-9-][^-])?[^-]+-*[a-z0-9-])[-_]?[a-z]', '(?:a|b)+[a-z0-9-]*[a-z]{2,5}',
    // an optional separator is no separator (\w+-?\w+ is \w+\w+ on an id without dashes: 30 s through AgentServer)
    '\\w+-?\\w+-?\\w+', '[a-z0-9]+[-_]?[a-z0-9]+[-_]?[a-z0-9]+', '[a-z]+\\.?[a-z]+\\.?[a-z]+',
    // a backreference may match anything; a repeat inside one alternative is in a row with what follows the group
    '(a)\\w*\\1\\w*\\1\\w*\\1\\w*', '..*?[a-z0-9_-]{0,31}(?:user[0-9a-f]?|[^/]*|agent@)(?:.{2,})[0-9]*agent',
    '(?<x>a)[a-z]+\\k<x>[a-z]+\\k<x>[a-z]+\\k<x>[a-z]+!',
    // a repeated group whose passes are not marked off: its mark in the middle, or two repeats in it that trade text (79 s at 111 characters)
    '(?:[a-z]+-[a-z]+)*', '(?:-[a-z]+[a-z]+)*', '(?:-[a-z]*_?[a-z]*)+x', '(?:-[a-z]+-)*', '(?:-(?:[a-z]+))*',
    // marked groups still trade passes with their neighbours: four slugs in a row took 287 ms at 256 characters, five 7 s
    '[a-z0-9]+(?:-[a-z0-9]+)*-[a-z0-9]+(?:-[a-z0-9]+)*-[a-z0-9]+(?:-[a-z0-9]+)*-[a-z0-9]+(?:-[a-z0-9]+)*',
    // characters beyond ASCII are compared too (the first took 1 s on 256 characters, its ā being one of [ā-ő])
    '[ā-ő]+ā[ā-ő]+ā[ā-ő]+ā[ā-ő]+!', '(?:ā[ā-ő]+)+x',
    // a verification search's finds: optional repeats between linked ones (0.8 s and 3 s), a lookaround read as a
    // separator (5 s), a bounded repeat of a group whose passes vary in length (5 s), a half of an emoji (2 s)
    '\\d+[a-z]*[a-z]*[a-z]*[a-z]*[a-z]*', '[xa]+a?[xb]+b?[xc]+c?[xd]+d?[xe]+', '\\w+(?!-)\\w+(?!-)\\w+(?!-)\\w+(?!-)\\w+',
    '(?:-\\d+){1,2}(?:\\d+-){1,2}(?:-\\d+){1,2}(?:\\d+-){1,2}(?:-\\d+){1,2}(?:\\d+-){1,2}', '(?:😀[^-]+)*',
    // rows apart still multiply: a failing id retries every split of one for each of the next (4.7 s, and 1.6 s)
    '\\w+-?\\w+\\.\\w+-?\\w+\\.\\w+-?\\w+\\.\\w+-?\\w+', '[a-z]+_?[a-z0-9]+\\.[a-z]+_?[a-z0-9]+\\.[a-z]+_?[a-z0-9]+\\.[a-z]+_?[a-z0-9]+',
  ];
  for (const source of dangerous) assert.equal(canBacktrackBadly(source), true, source);
  const fine = [
    '.*', 'worker-[0-9]+', '(foo|bar)+', '(a+)?', '[(a+)]+', '\\(a+\\)+', '(ab){3}', 'user-[a-f0-9]{8}',
    '(support|sales)-.*', '(?<n>ab|ac)+', '(a|a)', '(?:foo|bar|baz)+', '[a|a]*', 'a\\|a*',
    // two overlapping repeats cost n^2 (under a millisecond at 256 characters); disjoint ones never overlap
    'org-.*-.*-bot', '[a-z]+-[0-9]+-[a-z]+-[0-9]+', 'colou?r-.*', 'user-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-.*', '.*?-x',
    '[a-z]{2,10}[a-z]{2,10}[a-z]{2,10}', 'a*?b+?', '\\d+-\\d+\\.[a-z]+',
    // a repeat that cannot cross its separator has a forced extent: the chain breaks there
    '[^-]*-[^-]*-.*', '[^-]*-[^-]*-[^-]*', 'foo-.*|bar-.*|baz-.*', '(?:[^/]+)/(?:[^/]+)/.*',
    // dotted versions, separators in a class, slugs with an optional separator
    'v\\d+\\.\\d+\\.\\d+', '[a-z0-9]+\\.[a-z0-9]+\\.[a-z0-9]+', '\\w+\\.\\w+\\.\\w+', '[a-z]+[-_][a-z]+[-_][a-z]+',
    '[a-z0-9](?:-?[a-z0-9])*', '(?:_?[a-z0-9])+', 'tenant-[a-z]+\\.bot-[0-9]+',
    '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '[^@]+@[^@]+\\.[a-z]+',
    // a repeated group that starts or ends each pass with a character nothing else in it matches: slugs, dotted names
    '[a-z0-9]+(?:-[a-z0-9]+)*', 'user-[a-z0-9]+(?:-[a-z0-9]+)*', '\\w+(?:\\.\\w+)*', 'v\\d+(?:\\.\\d+)*', '(?:[a-z0-9]+-)*[a-z0-9]+',
    '[a-z]+(?:[-_][a-z0-9]+)*', '[a-z0-9]+(?:-[a-z0-9]+)*@[a-z]+(?:\\.[a-z]+)+', '(\\d*x)*', '(x*y)*z', '(?:-[a-z]+_?[0-9]*)+',
    // a repeated group matches only what its parts match: (?:ab)+ cannot give up text across the -
    '(?:ab)+-.*-.*',
    // a repeat cannot give up text to a group whose every pass starts with a character it does not match
    '[a-z0-9]+(?:-[a-z0-9]+)*@[a-z]+(?:\\.[a-z]+)+', '[a-z0-9]+(?:\\.[a-z0-9]+)*@[a-z0-9]+(?:[.-][a-z0-9]+)*\\.[a-z]{2,}',
    'tenant-[a-z0-9]+/user-[a-z0-9]+(?:-[a-z0-9]+)*', '[a-z0-9]+(?:[-_][a-z0-9]+)*-v\\d+(?:\\.\\d+)*',
  ];
  for (const source of fine) assert.equal(canBacktrackBadly(source), false, source);
  // Escapes are read whole: \u0101 is one character, \p{L} one class.
  assert.equal(canBacktrackBadly('[\\u0101-\\u0151]+\\u0101[\\u0101-\\u0151]+\\u0101[\\u0101-\\u0151]+\\u0101[\\u0101-\\u0151]+!', 'u'), true);
  assert.equal(canBacktrackBadly('\\p{L}+\\p{Lu}\\p{L}+\\p{Lu}\\p{L}+\\p{Lu}\\p{L}+!', 'u'), true);
  assert.equal(canBacktrackBadly('\\p{Lu}\\p{Ll}+(?:-\\p{Ll}+)*', 'u'), false);
  // Atoms whose characters cannot be listed ([^A-Z], \W, \p{Lu}) are taken to overlap: [^A-Z] and \p{Lu} share É, which
  // no sample of characters found (the first took 0.46 s on 40 characters, doubling every few more; the last 4.3 s on 256).
  for (const source of ['(?:[^A-Z]\\p{Lu}+)*', '(?:\\W\\p{Script=Greek}+)*', '\\p{Script=Greek}+\\W\\p{Script=Greek}+\\W\\p{Script=Greek}+\\W\\p{Script=Greek}+!']) {
    assert.equal(canBacktrackBadly(source, 'u'), true, source);
  }
  // With u, a character beyond U+FFFF is one atom: 😀 is one of [😀-😎] (90 s on 60 of them); case folding counts with i.
  assert.equal(canBacktrackBadly('(?:😀[😀-😎]+)*x', 'u'), true);
  assert.equal(canBacktrackBadly('(?:\u017f[a-z]+)+x', 'iu'), true);
  assert.equal(canBacktrackBadly('(?:\u017f[a-z]+)+x', 'u'), false);
  // With v, a class may hold a string ([\q{ab}]), which a one-character test never sees (5 s on 95 characters).
  assert.equal(canBacktrackBadly('(?:[\\q{ab}][a-z]+)*', 'v'), true);
  // A review's finds: legacy octal escapes read whole (\101 is A: 3 s), \u{...} in a class only with u (3 s), a group in a
  // gap crossed through any branch, an empty one included (146 ms), what stands between passing text on (8 segments: 3 s).
  for (const source of ['\\101*\\101*\\101*\\101*\\101*', '(?:[a-z]+[\\u{5f}_])+', '\\d*(?:|-)\\d*(?:|-)\\d*(?:|-)\\d*', '\\d+(?:-|x?)\\d+(?:-|x?)\\d+(?:-|x?)\\d+',
    Array(8).fill('[a-z]*[a-z0-9]{10}\\d*').join('-')]) {
    assert.equal(canBacktrackBadly(source), true, source);
  }
  assert.equal(canBacktrackBadly('\\d*[[\\d]x]*\\d*[[\\d]x]*', 'v'), true, 'with v, classes nest');
  // Counted dearer than it is (its digits have a forced extent), refused on the safe side: [^-]* for .* is the rewrite.
  assert.equal(canBacktrackBadly('.*-[0-9]+-.*'), true);
  // Without the u flag, \p{L} is the letters p{L}, and .+ can cross them.
  assert.equal(canBacktrackBadly('.+\\p{L}.+\\p{L}.+\\p{L}.+!'), true);
});

test('register refuses targets that are neither a class nor a transport', () => {
  const registry = new AgentRegistry();
  assert.throws(() => registry.register('x', {} as never), /Agent class .* or a transport/);
  assert.throws(() => registry.register(42 as never, Worker), /pattern must be a string or a RegExp/);
  // An Agent instance has chat() and stream(), but was served as if it were a remote (the id sent as the message).
  assert.throws(() => registry.register('inst', new Worker('inst') as never), /pass the Agent class, not an instance \(register\(pattern, Worker\)\).*new AgentRouter\(agent\)/);
  assert.throws(() => registry.register('x', { chat: async () => '' } as never), /Agent class .* or a transport/, 'a transport has all four methods');
  // What new Target(id) cannot make an agent of failed only at its first request, as a 500.
  assert.throws(() => registry.register('p-.*', (() => ({})) as never), /target \(anonymous function\) cannot make agents with new Target\(agentId\); pass a class that extends Agent/);
  assert.throws(() => registry.register('q-.*', class Bot {} as never), /target Bot cannot make agents with new Bot\(agentId\)/);
  // A plain function that returns an Agent (a factory) is a class as far as `new` goes.
  const factory = function Bot(id: string) {
    return new Worker(id);
  } as unknown as typeof Worker;
  const factories = new AgentRegistry();
  factories.register('bot-[0-9]+', factory);
  assert.equal(factories.resolve('bot-1'), factory);
  assert.deepEqual(registry._routes, []);
});

test('register checks the class actions up front', () => {
  class Bad extends Agent {
    static override actions = ['setState'];
  }
  class Missing extends Agent {
    static override actions = ['nothing'];
  }
  class Getter extends Agent {
    static override actions = ['total'];
    #items: number[] = [];
    get total(): number {
      return this.#items.length;
    }
  }
  class Version extends Agent {
    static override actions = ['version'];
  }
  class Field extends Agent {
    static override actions = ['add'];
    add = async (): Promise<number> => 1;
  }
  const registry = new AgentRegistry();
  assert.throws(() => registry.register('bad', Bad), /Bad.actions lists "setState", a built-in member/);
  assert.throws(() => registry.register('missing', Missing), /Missing has no method of that name/);
  // Not run on the prototype ("Cannot read private member"): named for what it is.
  assert.throws(() => registry.register('getter', Getter), /Getter.actions lists "total", but Getter has a getter, not a method/);
  assert.throws(() => registry.register('version', Version), /Version.actions lists "version", a built-in member/);
  // Set on each instance after the constructor runs, so nothing can see it when the class is checked: the message says so.
  assert.throws(() => registry.register('field', Field), {
    message: 'Field.actions lists "add", but Field has no method of that name (a class field such as add = async () => {...} is not a method: write async add() {...})',
  });
});

test('registering a pattern later does not change which route an id already resolved to', () => {
  const registry = new AgentRegistry();
  registry.register('.*', Worker);
  assert.equal(registry.resolve('late'), Worker);
  registry.register('late', Other); // first match still wins, whatever was cached
  assert.equal(registry.resolve('late'), Worker);
});
