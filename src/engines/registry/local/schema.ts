/**
 * The local registry's SQLite schema, the rows it stores, and the prepared statements every
 * connection to it uses.
 *
 * Tables: `meta` (the revision, the schema number), `services` (one row per service version:
 * metadata and endpoints as JSON), `nodes` (one row per node, with its absolute expiry or null),
 * `changes` (the names of the services each revision changed, bounded by the store). Also how a
 * SQLite or file error reads (message, codeOf).
 */
import type Database from 'better-sqlite3';
import type { Service } from '../registry.js';

export type DB = Database.Database;

export const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0), ('schema', 1);
CREATE TABLE IF NOT EXISTS services (
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  metadata TEXT NOT NULL,
  endpoints TEXT NOT NULL,
  PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS nodes (
  service TEXT NOT NULL,
  version TEXT NOT NULL,
  id TEXT NOT NULL,
  address TEXT NOT NULL,
  port INTEGER NOT NULL,
  metadata TEXT NOT NULL,
  expires_at INTEGER,
  PRIMARY KEY (service, version, id)
);
CREATE INDEX IF NOT EXISTS nodes_expires_at ON nodes (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS changes (
  revision INTEGER NOT NULL,
  service TEXT NOT NULL,
  PRIMARY KEY (revision, service)
);
`;

export interface NodeRow {
  version: string;
  id: string;
  address: string;
  port: number;
  metadata: string;
  expires_at: number | null;
}

export interface ServiceRow {
  name: string;
  version: string;
  metadata: string;
  endpoints: string;
}

/** The live rows of a file, as stored. */
export interface Snapshot {
  services: ServiceRow[];
  nodes: Array<NodeRow & { service: string }>;
}

type Stmt<P extends unknown[] | {} = unknown[], R = unknown> = Database.Statement<P, R>;

/** The prepared statements of one connection (see prepareStatements). */
export interface Statements {
  revision: Stmt<[], { value: number }>;
  bump: Stmt<[], { value: number }>;
  logChange: Stmt;
  trimChanges: Stmt;
  changesSince: Stmt<[number], { revision: number; service: string }>;
  minChange: Stmt<[], { m: number | null }>;
  expiredNames: Stmt<{ now: number }, { service: string }>;
  deleteExpired: Stmt;
  deleteEmptyVersions: Stmt;
  upsertService: Stmt;
  upsertNode: Stmt;
  deleteNode: Stmt;
  deleteNodeAnyVersion: Stmt;
  countLiveNodes: Stmt<{ name: string; now: number }, { n: number }>;
  liveNodes: Stmt<{ name: string; now: number }, NodeRow>;
  serviceRows: Stmt<[string], ServiceRow>;
  liveServiceRows: Stmt<{ now: number }, ServiceRow>;
  allNames: Stmt<[], { name: string }>;
  /** A write that changes nothing: proves the store takes writes. */
  touch: Stmt;
  /** A new file continues the revisions this process saw (watchers elsewhere reread everything). */
  raiseRevision: Stmt;
  allLiveNodes: Stmt<{ now: number }, NodeRow & { service: string }>;
  anyNode: Stmt<[], { one: number }>;
  minExpired: Stmt<{ now: number }, { m: number | null }>;
}

export function prepareStatements(db: DB): Statements {
  const live = '(expires_at IS NULL OR expires_at > @now)';
  return {
    revision: db.prepare<[], { value: number }>(`SELECT value FROM meta WHERE key = 'revision'`),
    bump: db.prepare<[], { value: number }>(`UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value`),
    logChange: db.prepare(`INSERT OR IGNORE INTO changes (revision, service) VALUES (?, ?)`),
    trimChanges: db.prepare(`DELETE FROM changes WHERE revision <= ?`),
    changesSince: db.prepare<[number], { revision: number; service: string }>(
      `SELECT revision, service FROM changes WHERE revision > ? ORDER BY revision, service`,
    ),
    minChange: db.prepare<[], { m: number | null }>(`SELECT MIN(revision) AS m FROM changes`),
    expiredNames: db.prepare<{ now: number }, { service: string }>(
      `SELECT DISTINCT service FROM nodes WHERE expires_at IS NOT NULL AND expires_at <= @now`,
    ),
    deleteExpired: db.prepare(`DELETE FROM nodes WHERE expires_at IS NOT NULL AND expires_at <= @now`),
    deleteEmptyVersions: db.prepare(
      `DELETE FROM services WHERE name = ? AND NOT EXISTS
         (SELECT 1 FROM nodes n WHERE n.service = services.name AND n.version = services.version)`,
    ),
    upsertService: db.prepare(
      `INSERT INTO services (name, version, metadata, endpoints) VALUES (@name, @version, @metadata, @endpoints)
       ON CONFLICT (name, version) DO UPDATE SET metadata = excluded.metadata, endpoints = excluded.endpoints`,
    ),
    upsertNode: db.prepare(
      `INSERT INTO nodes (service, version, id, address, port, metadata, expires_at)
       VALUES (@service, @version, @id, @address, @port, @metadata, @expires_at)
       ON CONFLICT (service, version, id) DO UPDATE SET address = excluded.address, port = excluded.port,
         metadata = excluded.metadata, expires_at = excluded.expires_at`,
    ),
    deleteNode: db.prepare(`DELETE FROM nodes WHERE service = ? AND version = ? AND id = ?`),
    deleteNodeAnyVersion: db.prepare(`DELETE FROM nodes WHERE service = ? AND id = ?`),
    countLiveNodes: db.prepare<{ name: string; now: number }, { n: number }>(
      `SELECT COUNT(*) AS n FROM nodes WHERE service = @name AND ${live}`,
    ),
    liveNodes: db.prepare<{ name: string; now: number }, NodeRow>(
      `SELECT version, id, address, port, metadata, expires_at FROM nodes WHERE service = @name AND ${live}`,
    ),
    serviceRows: db.prepare<[string], ServiceRow>(`SELECT name, version, metadata, endpoints FROM services WHERE name = ?`),
    liveServiceRows: db.prepare<{ now: number }, ServiceRow>(
      `SELECT s.name, s.version, s.metadata, s.endpoints FROM services s WHERE EXISTS
         (SELECT 1 FROM nodes n WHERE n.service = s.name AND n.version = s.version
            AND (n.expires_at IS NULL OR n.expires_at > @now))`,
    ),
    allNames: db.prepare<[], { name: string }>(`SELECT DISTINCT name FROM services`),
    /** A write that changes nothing: proves the store takes writes. */
    touch: db.prepare(`UPDATE meta SET value = value WHERE key = 'schema'`),
    /** A new file continues the revisions this process saw (watchers elsewhere reread everything). */
    raiseRevision: db.prepare(`UPDATE meta SET value = @rev WHERE key = 'revision' AND value < @rev`),
    allLiveNodes: db.prepare<{ now: number }, NodeRow & { service: string }>(
      `SELECT service, version, id, address, port, metadata, expires_at FROM nodes WHERE ${live}`,
    ),
    anyNode: db.prepare<[], { one: number }>(`SELECT 1 AS one FROM nodes LIMIT 1`),
    minExpired: db.prepare<{ now: number }, { m: number | null }>(
      `SELECT MIN(expires_at) AS m FROM nodes WHERE expires_at IS NOT NULL AND expires_at <= @now`,
    ),
  };
}

/** Writes a service version's row and its nodes' rows with the statements of one connection. */
export function upsertInto(st: Statements, s: Service, expiresAt: number | null): void {
  st.upsertService.run({ name: s.name, version: s.version, metadata: JSON.stringify(s.metadata), endpoints: JSON.stringify(s.endpoints) });
  for (const n of s.nodes) {
    st.upsertNode.run({
      service: s.name,
      version: s.version,
      id: n.id,
      address: n.address,
      port: n.port,
      metadata: JSON.stringify(n.metadata),
      expires_at: expiresAt,
    });
  }
}

/** A stored JSON column; text that is not JSON stays a string, which validation then rejects. */
export function parseStored(text: unknown): unknown {
  if (typeof text !== 'string') return text;
  try {
    return JSON.parse(text) ?? undefined;
  } catch {
    return text;
  }
}

/** An error as one line: SQLite's code first when it has one. */
export function message(err: unknown): string {
  if (err && typeof err === 'object' && 'code' in err && typeof (err as { code: unknown }).code === 'string') {
    const e = err as { code: string; message?: string };
    return e.message?.startsWith(e.code) ? e.message : `${e.code}: ${e.message ?? ''}`;
  }
  return err instanceof Error ? err.message : String(err);
}

/** The `code` of a Node.js or SQLite error, '' when it has none. */
export function codeOf(err: unknown): string {
  const c = err && typeof err === 'object' ? (err as { code?: unknown }).code : undefined;
  return typeof c === 'string' ? c : '';
}
