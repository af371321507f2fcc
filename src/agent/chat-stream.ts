import type { ChatSink } from './chat-engine.ts';
import type { Turn, TurnEvent } from './turn.ts';

/**
 * `Agent.stream()`: the chat engine's text handed to a `for await` loop,
 * one chunk per pull. The turn starts at the first pull and waits for each
 * next pull before going on (backpressure); leaving the loop early cuts it.
 */
export class ChatStream implements AsyncIterableIterator<string> {
  readonly #feed: Feed;

  constructor(agentId: string, start: (sink: ChatSink) => Turn<any>) {
    this.#feed = new Feed(agentId, start);
    // The engine holds the feed, never this iterator: dropped unfinished, it can be collected, and the turn ended.
    droppedStreams.register(this, this.#feed, this.#feed);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<string>> {
    return this.#feed.pull();
  }

  /** Leaving early: the turn is cut (it stores nothing), and this resolves once the agent is free again. */
  async return(): Promise<IteratorResult<string>> {
    droppedStreams.unregister(this.#feed);
    await this.#feed.leave();
    return { done: true, value: undefined };
  }
}

/** Ends the turn of a stream() iterator dropped unfinished without return(), once the garbage collector took it. */
const droppedStreams = new FinalizationRegistry<Feed>((feed) => feed.dropped());

const DONE: IteratorResult<string> = { done: true, value: undefined };

/** The sink side: what the engine pushes, and the consumer's pulls it waits for. */
class Feed implements ChatSink {
  readonly #agentId: string;
  readonly #start: (sink: ChatSink) => Turn<any>;
  #turn: Turn<any> | undefined;
  /** The consumer waits for the next chunk. */
  #waiting: { resolve: (next: IteratorResult<string>) => void; reject: (error: unknown) => void } | undefined;
  /** The engine waits for the consumer's next pull. */
  #pulled: { resolve: () => void; reject: (error: unknown) => void } | undefined;
  /** How the turn ended, for the pulls after it. */
  #end: { error: unknown } | 'done' | undefined;
  /** Resolves once the turn ended. */
  readonly #ended: Promise<void>;
  #onEnded!: () => void;

  constructor(agentId: string, start: (sink: ChatSink) => Turn<any>) {
    this.#agentId = agentId;
    this.#start = start;
    this.#ended = new Promise((resolve) => (this.#onEnded = resolve));
  }

  pull(): Promise<IteratorResult<string>> {
    if (this.#end !== undefined) return this.#end === 'done' ? Promise.resolve(DONE) : Promise.reject(this.#takeError());
    const promise = new Promise<IteratorResult<string>>((resolve, reject) => (this.#waiting = { resolve, reject }));
    if (this.#turn === undefined) this.#turn = this.#start(this);
    const pulled = this.#pulled;
    this.#pulled = undefined;
    pulled?.resolve();
    return promise;
  }

  event(event: TurnEvent): Promise<void> | undefined {
    if (event.type !== 'text') return undefined;
    const waiting = this.#waiting;
    this.#waiting = undefined;
    waiting?.resolve({ done: false, value: event.text });
    return new Promise<void>((resolve, reject) => (this.#pulled = { resolve, reject }));
  }

  done(): void {
    this.#finish('done');
  }

  failed(error: unknown): void {
    this.#finish({ error });
  }

  async leave(): Promise<void> {
    if (this.#turn === undefined || this.#end !== undefined) return;
    this.#cut(new Error('the stream was left before the turn completed'));
    await this.#ended;
    // Left on purpose: the cut is no error to report.
    this.#end = 'done';
  }

  dropped(): void {
    if (this.#turn === undefined || this.#end !== undefined) return;
    process.emitWarning(
      `Agent ${JSON.stringify(this.#agentId)}: a stream() iterator was dropped unfinished without return() (leave a for await loop with break, or call return()); its turn held the agent until the garbage collector took the iterator, and was not stored`,
      { type: 'AgentRouterWarning', code: 'dropped_stream' },
    );
    this.#cut(new Error('the stream was dropped before the turn completed'));
  }

  /** Ends the turn: where it waits for a pull, that wait fails; a cancel of its own is aborted, so its model stops. */
  #cut(reason: Error): void {
    const pulled = this.#pulled;
    this.#pulled = undefined;
    pulled?.reject(reason);
    const turn = this.#turn as Turn<any>;
    if (pulled === undefined || turn.ownsCancel) turn.cancel.abort(reason);
  }

  #finish(end: { error: unknown } | 'done'): void {
    this.#end = end;
    this.#onEnded();
    const waiting = this.#waiting;
    this.#waiting = undefined;
    if (waiting === undefined) return;
    if (end === 'done') waiting.resolve(DONE);
    else waiting.reject(this.#takeError());
  }

  /** A failure is reported to one pull; the pulls after it see the stream done, as a generator's would. */
  #takeError(): unknown {
    const end = this.#end as { error: unknown };
    this.#end = 'done';
    return end.error;
  }
}
