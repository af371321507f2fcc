import { createHash, randomUUID } from 'node:crypto';
import type { PgPoolClientLike, PgPoolLike } from './postgres-session.ts';
import type { TableNames } from './postgres-sql.ts';
import { TurnListeners } from './turn-listeners.ts';
import type { CancelRequest, SharedTurnLog, TurnChannel, TurnLogWrite } from './turn-channel.ts';
import { rethrowOutage } from './outage.ts';

/** How long a live turn's rows are kept without a write: only a crashed writer's turn expires this way. */
const LIVE_TTL_SECONDS = 24 * 60 * 60;
/** Expired turns are deleted at most this often per process, by the process writing. */
const SWEEP_EVERY_MS = 60_000;
/** After the listening connection is lost, the wait before another is taken. */
const RELISTEN_MS = 500;

interface CancelMessage {
  readonly req: string;
  readonly agentId: string;
  readonly request: CancelRequest;
}

/**
 * `TurnChannel` on Postgres, through the user's pool: a turn's events are
 * rows of `turn_events`, its end and expiry a row of `turns`; live tail and
 * cancel go over LISTEN/NOTIFY on one connection of the pool, taken at the
 * first follow or onCancel. Notifications carry ids, never events (8000 bytes at most).
 */
const OUTAGE = rethrowOutage('postgresStorage');

export class PostgresTurnChannel implements TurnChannel {
  readonly #pool: PgPoolLike;
  readonly #t: TableNames;
  readonly #ready: () => Promise<unknown>;
  readonly #lockKey: (agentId: string) => string;
  /** The NOTIFY channels: one set per schema and table prefix. */
  readonly #events: string;
  readonly #cancels: string;
  readonly #answers: string;
  /** The listening session's one statement: what pg_stat_activity shows of it. */
  readonly #listenStatement: string;
  #listener: Promise<PgPoolClientLike> | undefined;
  #closed = false;
  #sweptAt = 0;
  readonly #listeners = new TurnListeners();

  constructor(pool: PgPoolLike, tables: TableNames, ready: () => Promise<unknown>, lockKey: (agentId: string) => string) {
    this.#pool = pool;
    this.#t = tables;
    this.#ready = () => ready().catch(OUTAGE);
    this.#lockKey = lockKey;
    const tag = createHash('sha256').update(tables.namespace).digest('hex').slice(0, 16);
    this.#events = `agent_router_${tag}_events`;
    this.#cancels = `agent_router_${tag}_cancel`;
    this.#answers = `agent_router_${tag}_cancelled`;
    this.#listenStatement = `LISTEN "${this.#events}"; LISTEN "${this.#cancels}"; LISTEN "${this.#answers}"`;
  }

  async append(write: TurnLogWrite): Promise<void> {
    await this.#ready();
    const { turnId, agentId, from, entries, first, ended, ttlSeconds } = write;
    const ttl = `${ended ? Math.max(1, Math.ceil(ttlSeconds)) : LIVE_TTL_SECONDS} seconds`;
    const t = this.#t;
    await this.#query(
      `WITH turn AS (
         INSERT INTO ${t.turns} (turn_id, agent_id, first, ended, expires_at) VALUES ($1, $2, $3, $4, now() + $5::interval)
         ON CONFLICT (turn_id) DO UPDATE SET first = EXCLUDED.first, ended = EXCLUDED.ended, expires_at = EXCLUDED.expires_at
       ), added AS (
         INSERT INTO ${t.turnEvents} (turn_id, seq, entry)
         SELECT $1, $6::integer + ord::integer - 1, entry FROM unnest($7::text[]) WITH ORDINALITY AS e(entry, ord)
         ON CONFLICT DO NOTHING
       ), dropped AS (
         DELETE FROM ${t.turnEvents} WHERE turn_id = $1 AND seq < $3
       )
       SELECT pg_notify($8, $1)`,
      [turnId, agentId, first, ended, ttl, from, entries, this.#events],
    );
    if (ended && Date.now() - this.#sweptAt > SWEEP_EVERY_MS) {
      this.#sweptAt = Date.now();
      await this.#query(
        `WITH gone AS (DELETE FROM ${t.turns} WHERE expires_at < now() RETURNING turn_id)
         DELETE FROM ${t.turnEvents} WHERE turn_id IN (SELECT turn_id FROM gone)`,
      );
    }
  }

  async read(turnId: string, after: number): Promise<SharedTurnLog | undefined> {
    await this.#ready();
    const t = this.#t;
    const { rows } = await this.#query(
      `SELECT t.agent_id, t.first, t.ended, e.seq, e.entry FROM ${t.turns} t
       LEFT JOIN ${t.turnEvents} e ON e.turn_id = t.turn_id AND e.seq >= GREATEST($2::integer, t.first)
       WHERE t.turn_id = $1 AND t.expires_at > now() ORDER BY e.seq`,
      [turnId, after + 1],
    );
    const head = rows[0];
    if (head === undefined) return undefined;
    const first = Number(head['first']);
    const entries = rows.filter((row) => row['seq'] !== null).map((row) => String(row['entry']));
    const from = head['seq'] === null ? Math.max(after + 1, first) : Number(head['seq']);
    return { agentId: String(head['agent_id']), first, from, entries, ended: head['ended'] === true };
  }

  async follow(turnId: string, wake: () => void): Promise<() => void> {
    await this.#listening();
    return this.#listeners.follow(turnId, wake);
  }

  async busy(agentId: string): Promise<boolean> {
    // A bigint advisory key shows in pg_locks as its high 32 bits (classid) and low 32 bits (objid).
    const { rows } = await this.#query(
      `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
         AND classid::bigint = ($1::bigint >> 32) & 4294967295 AND objid::bigint = $1::bigint & 4294967295) AS busy`,
      [this.#lockKey(agentId)],
    );
    return rows[0]?.['busy'] === true;
  }

  async cancel(agentId: string, request: CancelRequest, waitMs: number): Promise<string[]> {
    await this.#listening();
    const expected = await this.#listeningSessions();
    const req = randomUUID();
    const message: CancelMessage = { req, agentId, request };
    const notify = async (): Promise<undefined> => void (await this.#query('SELECT pg_notify($1, $2)', [this.#cancels, JSON.stringify(message)]));
    // Every listening process answers once; one turn named (or the running one) is held by one at most.
    return this.#listeners.gather(req, request, waitMs, notify, expected, true);
  }

  /**
   * How many sessions listen on this channel (one per process), from the sessions' last query: NOTIFY cannot
   * count its listeners. Infinity when some sessions are hidden from this role: then a cancel waits its whole wait.
   */
  async #listeningSessions(): Promise<number> {
    const { rows } = await this.#query(
      `SELECT count(*) FILTER (WHERE query = $1)::int AS listening, count(*) FILTER (WHERE query = '<insufficient privilege>')::int AS hidden
         FROM pg_stat_activity WHERE datname = current_database()`,
      [this.#listenStatement],
    );
    const row = rows[0] as { listening: number; hidden: number } | undefined;
    return row === undefined || row.hidden > 0 || row.listening === 0 ? Infinity : row.listening;
  }

  async onCancel(handler: (agentId: string, request: CancelRequest) => string[]): Promise<() => void> {
    await this.#listening();
    return this.#listeners.onCancel(handler);
  }

  /** Gives the listening connection back (closed: LISTEN holds its session). */
  async close(): Promise<void> {
    this.#closed = true;
    const listener = this.#listener;
    this.#listener = undefined;
    if (listener !== undefined) (await listener.catch(() => undefined))?.release(true);
  }

  /** A query of the channel's; as the storage's own, a Postgres that cannot serve is 503 storage_unavailable to whoever asked. */
  #query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }> {
    return this.#pool.query(text, values).catch(OUTAGE) as Promise<{ rows: Array<Record<string, unknown>> }>;
  }

  #listening(): Promise<PgPoolClientLike> {
    if (this.#listener !== undefined) return this.#listener;
    const listening = (async () => {
      const client = await this.#pool.connect();
      const emitter = client as unknown as { on(event: string, listener: (arg: never) => void): unknown };
      emitter.on('notification', (message: { channel: string; payload?: string }) => this.#notified(message.channel, message.payload ?? ''));
      emitter.on('error', () => this.#lost(listening, client));
      emitter.on('end', () => this.#lost(listening, client));
      await client.query(this.#listenStatement);
      return client;
    })().catch(OUTAGE);
    this.#listener = listening;
    listening.catch(() => {
      if (this.#listener === listening) this.#listener = undefined;
    });
    return listening;
  }

  /** The listening connection died: another is taken, and every follower reads again (what it missed meanwhile). */
  #lost(listening: Promise<PgPoolClientLike>, client: PgPoolClientLike): void {
    if (this.#listener !== listening) return;
    this.#listener = undefined;
    client.release(true);
    if (this.#closed) return;
    setTimeout(() => {
      if (this.#closed || this.#listeners.idle) return;
      this.#listening().then(
        () => {
          this.#listeners.wakeAll();
        },
        () => {},
      );
    }, RELISTEN_MS).unref();
  }

  #notified(channel: string, payload: string): void {
    if (channel === this.#events) {
      this.#listeners.wake(payload);
    } else if (channel === this.#answers) {
      const { req, ids } = JSON.parse(payload) as { req: string; ids: string[] };
      this.#listeners.answered(req, ids);
    } else if (channel === this.#cancels) {
      const { req, agentId, request } = JSON.parse(payload) as CancelMessage;
      const ids = this.#listeners.cancelHere(req, agentId, request);
      // Answered even with nothing cancelled: the asking process counts the answers.
      this.#pool.query('SELECT pg_notify($1, $2)', [this.#answers, JSON.stringify({ req, ids })]).catch(() => {});
    }
  }
}
