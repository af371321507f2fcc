/**
 * The SQL of postgresStorage: table names, the DDL and every statement, in
 * one place to read and review. Agent ids are keyed by the hex SHA-256 of
 * their UTF-8 bytes, because a B-tree entry cannot exceed about 2.7 kB and
 * ids can be longer; to find a row by id by hand:
 * `WHERE key = encode(sha256(convert_to('bob', 'UTF8')), 'hex')`.
 *
 * State and messages are `json`, not `jsonb`: `json` keeps the text as
 * written (key order, duplicate keys, `\u0000` escapes), so what is loaded
 * is exactly what was committed.
 */

export interface TableNames {
  agents: string;
  messages: string;
  turns: string;
  turnEvents: string;
  /** Namespaces the advisory-lock keys, so two prefixes never lock each other's ids. */
  namespace: string;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Quoted, schema-qualified table names; refuses names that would need escaping. */
export function tableNames(options: { schema?: string | undefined; tablePrefix?: string | undefined }): TableNames {
  const prefix = options.tablePrefix ?? 'agent_router_';
  if (prefix !== '' && !IDENTIFIER.test(prefix)) {
    throw new TypeError(`postgresStorage: tablePrefix must be letters, digits and underscores, starting with a letter or underscore; got ${JSON.stringify(prefix)}`);
  }
  if (prefix.length + 'turn_events'.length > 63) throw new TypeError('postgresStorage: tablePrefix must be at most 52 characters (Postgres names stop at 63)');
  const schema = options.schema;
  if (schema !== undefined && (!IDENTIFIER.test(schema) || schema.length > 63)) {
    throw new TypeError(`postgresStorage: schema must be a plain identifier (letters, digits, underscores); got ${JSON.stringify(schema)}`);
  }
  const qualify = (name: string): string => (schema === undefined ? `"${name}"` : `"${schema}"."${name}"`);
  return {
    agents: qualify(`${prefix}agents`),
    messages: qualify(`${prefix}messages`),
    turns: qualify(`${prefix}turns`),
    turnEvents: qualify(`${prefix}turn_events`),
    namespace: `${schema ?? ''}.${prefix}`,
  };
}

/**
 * The tables postgresStorage uses, as `CREATE ... IF NOT EXISTS` statements:
 * run them from a migration and pass `createTables: false`, or let the
 * storage run them on first use.
 *
 * - `agents`: one row per agent id: its state and version. A turn updates it in place.
 * - `messages`: one row per history message, keyed by (agent key, version, index in
 *   that commit). A turn inserts its rows; the history is never rewritten, so a
 *   turn's cost does not grow with the history.
 * - `turns` and `turn_events`: the events of streamed turns, for rejoins through
 *   any process; an ended turn's rows go `replayTTL` seconds after its end.
 */
export function postgresStorageDDL(options: { schema?: string | undefined; tablePrefix?: string | undefined } = {}): string {
  const t = tableNames(options);
  const schema = options.schema === undefined ? '' : `CREATE SCHEMA IF NOT EXISTS "${options.schema}";\n`;
  return `${schema}CREATE TABLE IF NOT EXISTS ${t.agents} (
  key text PRIMARY KEY,
  id text NOT NULL,
  version bigint NOT NULL,
  state json NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ${t.messages} (
  key text NOT NULL,
  version bigint NOT NULL,
  idx integer NOT NULL,
  message json NOT NULL,
  PRIMARY KEY (key, version, idx)
);
CREATE TABLE IF NOT EXISTS ${t.turns} (
  turn_id text PRIMARY KEY,
  agent_id text NOT NULL,
  first integer NOT NULL,
  ended boolean NOT NULL,
  expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS ${t.turnEvents} (
  turn_id text NOT NULL,
  seq integer NOT NULL,
  entry text NOT NULL,
  PRIMARY KEY (turn_id, seq)
);
`;
}

/** Every statement the storage runs, for one set of tables. */
export function statements(t: TableNames) {
  const appendRows = (source: string) =>
    `INSERT INTO ${t.messages} (key, version, idx, message)
     SELECT $1, ${source}.version, e.idx, e.message FROM ${source}, json_array_elements($4::json) WITH ORDINALITY AS e(message, idx)`;
  return {
    head: `SELECT version FROM ${t.agents} WHERE key = $1`,
    load: `SELECT a.version, a.state::text AS state,
             (SELECT coalesce(json_agg(m.message ORDER BY m.version, m.idx), '[]'::json)::text
                FROM ${t.messages} m WHERE m.key = a.key) AS messages
           FROM ${t.agents} a WHERE a.key = $1`,
    // The history after a version the caller has: a range of the primary key, not the whole history.
    loadSince: `SELECT a.version, a.state::text AS state,
             (SELECT coalesce(json_agg(m.message ORDER BY m.version, m.idx), '[]'::json)::text
                FROM ${t.messages} m WHERE m.key = a.key AND m.version > $2) AS messages
           FROM ${t.agents} a WHERE a.key = $1`,
    // One statement each: the version check, the state and the history rows commit together with no transaction held
    // across round trips. A racing writer blocks on the row, then re-checks `version` and matches nothing.
    commitFirst: `WITH a AS (
        INSERT INTO ${t.agents} (key, id, version, state) VALUES ($1, $2, $5, $3::json)
        ON CONFLICT (key) DO NOTHING RETURNING version
      ), m AS (${appendRows('a')})
      SELECT version FROM a`,
    commitNext: `WITH a AS (
        UPDATE ${t.agents} SET version = version + 1, state = $3::json, updated_at = now()
        WHERE key = $1 AND version = $2 RETURNING version
      ), m AS (${appendRows('a')})
      SELECT version FROM a`,
    // After a commit whose answer was lost: the record's version and state now, and the messages
    // stored at the version that commit would have made.
    landed: `SELECT a.version, a.state::text AS state,
             (SELECT coalesce(json_agg(m.message ORDER BY m.idx), '[]'::json)::text
                FROM ${t.messages} m WHERE m.key = a.key AND m.version = $2) AS messages
           FROM ${t.agents} a WHERE a.key = $1`,
    // The agent's row first: the delete waits for a commit in flight, and the messages delete after it (a new snapshot
    // under READ COMMITTED) sees that commit's rows. One statement's snapshot would leave them behind.
    deleteAgent: `DELETE FROM ${t.agents} WHERE key = $1`,
    deleteMessages: `DELETE FROM ${t.messages} WHERE key = $1`,
    // Session-level advisory lock; `prior` restores the pool's own idle_session_timeout at unlock.
    tryLock: 'SELECT pg_try_advisory_lock($1::bigint) AS ok, pg_backend_pid() AS pid, now()::text AS since',
    // The lease: Postgres (14+) ends a session idle past idle_session_timeout, lock included. `prior` is read first so
    // unlock can restore the pool's own setting.
    tryLockWithLease: `WITH prior AS MATERIALIZED (SELECT current_setting('idle_session_timeout') AS value)
      SELECT prior.value AS prior, set_config('idle_session_timeout', $2, false) AS lease,
             pg_try_advisory_lock($1::bigint) AS ok, pg_backend_pid() AS pid, now()::text AS since FROM prior`,
    waitLock: 'SELECT pg_advisory_lock($1::bigint)',
    unlock: 'SELECT pg_advisory_unlock($1::bigint)',
    unlockAndRestore: "SELECT pg_advisory_unlock($1::bigint), set_config('idle_session_timeout', $2, false)",
    cancel: 'SELECT pg_cancel_backend($1)',
    // A session is named by its pid and a time it was already running: after a server restart the
    // pid may be another session's, started later.
    terminate: 'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_start <= $2::timestamptz',
    alive: 'SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND backend_start <= $2::timestamptz',
    ping: 'SELECT 1',
    serverVersion: "SELECT current_setting('server_version_num')::int AS version",
  };
}
