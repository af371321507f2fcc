import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { describe, it } from 'node:test';
import { OpenResponses } from '../../src/http/open-responses.ts';

// The list only holds the responses and hands them back: a named object stands in for each.
const response = (name: string): ServerResponse => ({ name }) as unknown as ServerResponse;
const names = (open: OpenResponses): string[] => open.list().map((res) => (res as unknown as { name: string }).name);

describe('OpenResponses', () => {
  it('lists responses oldest first and unlinks any of them, the first, a middle one or the last, once', () => {
    const open = new OpenResponses();
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((name) => open.add(response(name)));
    assert.deepEqual(names(open), ['a', 'b', 'c', 'd']);
    assert.equal(open.size, 4);
    open.delete(b!);
    assert.deepEqual(names(open), ['a', 'c', 'd']);
    open.delete(b!);
    assert.equal(open.size, 3, 'deleting twice counts once');
    open.delete(d!);
    assert.deepEqual(names(open), ['a', 'c']);
    const e = open.add(response('e'));
    assert.deepEqual(names(open), ['a', 'c', 'e']);
    open.delete(a!);
    open.delete(c!);
    assert.deepEqual(names(open), ['e']);
    open.delete(e);
    assert.deepEqual(names(open), []);
    assert.equal(open.size, 0);
    open.add(response('f'));
    assert.deepEqual(names(open), ['f']);
  });

  it('keeps a Set\'s order and size over random adds and deletes', () => {
    // A fixed seed, printed on failure: the same walk every run.
    let seed = 20261201;
    const random = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const open = new OpenResponses();
    const model = new Set<string>();
    const entries: Array<[string, ReturnType<OpenResponses['add']>]> = [];
    for (let step = 0; step < 2000; step++) {
      if (entries.length === 0 || random(3) > 0) {
        const name = `r${step}`;
        entries.push([name, open.add(response(name))]);
        model.add(name);
      } else {
        const [name, entry] = entries[random(entries.length)]!;
        open.delete(entry);
        model.delete(name);
      }
      assert.equal(open.size, model.size, `size at step ${step} (seed 20261201)`);
    }
    assert.deepEqual(names(open), [...model]);
  });
});
