/** A record a LinkedList links: it carries its own neighbours. */
export interface Linked<T> {
  older: T | undefined;
  newer: T | undefined;
}

/**
 * A doubly linked list through its records' own `older`/`newer` fields,
 * oldest to newest. Adding and removing writes a few fields: a Set or Map
 * keyed by a new object per request costs it an identity hash and a table slot.
 * A record is in one list at most.
 */
export class LinkedList<T extends Linked<T>> {
  #oldest: T | undefined;
  #newest: T | undefined;
  #size = 0;

  get oldest(): T | undefined {
    return this.#oldest;
  }

  get newest(): T | undefined {
    return this.#newest;
  }

  get size(): number {
    return this.#size;
  }

  /** Whether `record` is in this list now. */
  has(record: T): boolean {
    return record.older !== undefined || this.#oldest === record;
  }

  /** Adds `record` at the newest end. */
  push(record: T): void {
    record.older = this.#newest;
    record.newer = undefined;
    if (this.#newest === undefined) this.#oldest = record;
    else this.#newest.newer = record;
    this.#newest = record;
    this.#size++;
  }

  /** Adds `record` at the oldest end. */
  unshift(record: T): void {
    record.older = undefined;
    record.newer = this.#oldest;
    if (this.#oldest === undefined) this.#newest = record;
    else this.#oldest.older = record;
    this.#oldest = record;
    this.#size++;
  }

  /** Takes `record` out; false (and nothing done) when it is not in the list. */
  remove(record: T): boolean {
    if (!this.has(record)) return false;
    const { older, newer } = record;
    if (older === undefined) this.#oldest = newer;
    else older.newer = newer;
    if (newer === undefined) this.#newest = older;
    else newer.older = older;
    // Unlinked both ways: a record held elsewhere must not keep its neighbours alive.
    record.older = record.newer = undefined;
    this.#size--;
    return true;
  }
}
