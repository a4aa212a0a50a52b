/**
 * The http broker's durable subscriptions on one machine: an outbox in SQLite (`broker.db`, a
 * sibling of the local registry's database in its directory), shared by every process using the
 * directory.
 *
 * Tables (schema version 2, `PRAGMA user_version`):
 * - `messages`: each message of a topic that has consumers, stored once (seq, topic, Mesh-Id,
 *   header, body, publish time), whatever the number of consumers.
 * - `consumers`: per topic and name, the cursor (the last seq it has taken for a first delivery,
 *   or the latest seq when it was made: only later messages are kept for it) and when a
 *   subscriber of it last ran.
 * - `inflight`: per consumer, the messages it took and has not acknowledged (delivery count, when
 *   it is due again).
 * - `topic_bytes`: the bytes stored per topic (header as JSON plus body), kept by triggers.
 *
 * - A durable subscription registers its consumer (topic, name); it stays registered after the
 *   subscriber stops, so messages are kept for it, until it is idle past the inactive threshold or
 *   removed (`mesh consumers rm`). At most maxConsumers names per topic.
 * - A publish to a topic with consumers stores one row before it resolves.
 * - Each running subscriber of a name claims, in one write transaction (SQLite's write lock: two
 *   processes never claim the same message at once), its due inflight rows and then the messages
 *   after its cursor, marks them invisible for the ack wait and counts the attempt; its handler
 *   returning deletes the inflight row (ack), a throw makes it due again after the backoff (nack);
 *   a row not answered within the ack wait (the subscriber died) is due again by itself. After
 *   maxDeliver attempts the message is published to the dead-letter topic.
 * - A message is deleted once every consumer of its topic is past it and none has it inflight,
 *   when it is older than the max age, or when its topic is over the byte budget (oldest first).
 * - Subscribers look for due rows every pollMs (50 ms) while idle, at once when this process
 *   published to the topic.
 * - A file of the first schema (one row per message and consumer) is migrated when opened.
 */
import Database from 'better-sqlite3';
import { closeSync, openSync } from 'node:fs';
import { PRIVATE_FILE_MODE, privateDirectory, privateFiles } from '../../../base/util/private-files.js';
import { shmWriteProblem } from '../../../base/util/sqlite-shm.js';
import { join } from 'node:path';
import type pino from 'pino';
import { BrokerUnavailableError, type ConsumerInfo, type Message, type MessageHandler, type Subscription } from '../broker.js';
import {
  deadLetter,
  DLQ_KEEPER,
  nackDelayMs,
  replayed,
  runDurable,
  tooManyConsumers,
  withMessageId,
  type DurableDefaults,
  type DurableSettings,
  type DurableStats,
} from '../durable.js';

export const OUTBOX_FILE = 'broker.db';
/** The schema this code writes (PRAGMA user_version); 0 is a new file or the first schema. */
const SCHEMA_VERSION = 2;
/** Rows claimed at once by one subscription (its handlers run concurrently). */
const CLAIM_BATCH = 64;
const BUSY_TIMEOUT_MS = 5000;
/** The bytes of a messages row as SQL: its header (as UTF-8) and body. */
const ROW_BYTES = (row: string): string => `(length(CAST(${row}.header AS BLOB)) + length(${row}.body))`;
/** Drops over --broker_stream_max_bytes are logged at most once per this, per topic. */
const DROP_LOG_MS = 60_000;
/** The pending gauge is counted at most once per this, per topic and consumer. */
const PENDING_CHECK_MS = 1000;
/** Most (topic, consumer) pairs whose pending gauge one process keeps counting. */
const MAX_PENDING_CHECKS = 1000;
/** A running subscriber marks its consumer active at most once per this (and a quarter of the threshold). */
const TOUCH_MS = 60_000;

interface Row {
  seq: number;
  id: string;
  header: string;
  body: Buffer;
  deliveries: number;
}

export interface OutboxOptions {
  directory: string;
  defaults: DurableDefaults;
  stats: DurableStats;
  logger: pino.Logger;
  /** Publishes a dead-lettered message (through the broker: durable and plain subscribers). */
  publish: (topic: string, message: Message) => Promise<void>;
  /** Idle poll interval; default 50 ms. */
  pollMs?: number;
}

interface Running {
  topic: string;
  wake: () => void;
  stop: () => Promise<void>;
}

/** The tables of schema 2 (see the comment at the top). */
const SCHEMA = `
  CREATE TABLE IF NOT EXISTS consumers (
    topic TEXT NOT NULL, name TEXT NOT NULL, cursor INTEGER NOT NULL, active_at INTEGER NOT NULL,
    PRIMARY KEY (topic, name));
  CREATE INDEX IF NOT EXISTS consumers_cursor ON consumers (topic, cursor);
  CREATE INDEX IF NOT EXISTS consumers_active ON consumers (active_at);
  CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, id TEXT NOT NULL,
    header TEXT NOT NULL, body BLOB NOT NULL, published_at INTEGER NOT NULL);
  CREATE INDEX IF NOT EXISTS messages_topic ON messages (topic, seq);
  CREATE INDEX IF NOT EXISTS messages_age ON messages (published_at);
  CREATE TABLE IF NOT EXISTS inflight (
    topic TEXT NOT NULL, consumer TEXT NOT NULL, seq INTEGER NOT NULL,
    deliveries INTEGER NOT NULL, visible_at INTEGER NOT NULL,
    PRIMARY KEY (topic, consumer, seq)) WITHOUT ROWID;
  CREATE INDEX IF NOT EXISTS inflight_due ON inflight (topic, consumer, visible_at);
  CREATE INDEX IF NOT EXISTS inflight_seq ON inflight (topic, seq);
  CREATE TABLE IF NOT EXISTS topic_bytes (topic TEXT PRIMARY KEY, bytes INTEGER NOT NULL);
  CREATE TRIGGER IF NOT EXISTS messages_insert AFTER INSERT ON messages BEGIN
    INSERT INTO topic_bytes (topic, bytes) VALUES (NEW.topic, ${ROW_BYTES('NEW')})
    ON CONFLICT (topic) DO UPDATE SET bytes = bytes + excluded.bytes;
  END;
  CREATE TRIGGER IF NOT EXISTS messages_delete AFTER DELETE ON messages BEGIN
    UPDATE topic_bytes SET bytes = bytes - ${ROW_BYTES('OLD')} WHERE topic = OLD.topic;
    DELETE FROM inflight WHERE topic = OLD.topic AND seq = OLD.seq;
  END;
`;

/**
 * Opens (creating, or migrating from the first schema) the outbox file's tables. The first
 * schema kept one messages row per consumer (topic, consumer, id, header, body, deliveries,
 * visible_at, published_at): each message becomes one row (its copies share the topic and
 * Mesh-Id), and each consumer's rows become its inflight rows, with their delivery counts.
 */
function openSchema(db: Database.Database): void {
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version === SCHEMA_VERSION) return;
    if (version > SCHEMA_VERSION) throw new Error(`the file has schema version ${version}, newer than this mesh (${SCHEMA_VERSION}): upgrade mesh, or move the file away to start empty`);
    const columns = (db.prepare("SELECT name FROM pragma_table_info('messages')").all() as Array<{ name: string }>).map((c) => c.name);
    const old = columns.includes('consumer');
    if (old) {
      db.exec(`
        DROP TRIGGER IF EXISTS backlog_insert; DROP TRIGGER IF EXISTS backlog_delete; DROP TABLE IF EXISTS backlog;
        DROP INDEX IF EXISTS messages_due;
        ALTER TABLE messages RENAME TO messages_v1;
        ALTER TABLE consumers RENAME TO consumers_v1;
      `);
    }
    db.exec(SCHEMA);
    if (old) {
      const now = Date.now();
      db.exec(`
        INSERT INTO messages (topic, id, header, body, published_at)
          SELECT topic, id, header, body, published_at FROM messages_v1 m
          WHERE seq = (SELECT min(seq) FROM messages_v1 f WHERE f.topic = m.topic AND f.id = m.id) ORDER BY seq;
        INSERT OR IGNORE INTO inflight (topic, consumer, seq, deliveries, visible_at)
          SELECT o.topic, o.consumer, n.seq, o.deliveries, o.visible_at FROM messages_v1 o JOIN messages n ON n.topic = o.topic AND n.id = o.id;
        INSERT INTO consumers (topic, name, cursor, active_at)
          SELECT topic, name, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0), ${now} FROM consumers_v1;
        DROP TABLE messages_v1; DROP TABLE consumers_v1;
      `);
    }
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}

export class Outbox {
  private readonly db: Database.Database;
  private readonly file: string;
  /** Why the -shm file refuses writes, while it does (see `st`). */
  private shmProblem: string | undefined;
  private readonly statements: {
    hasConsumers: Database.Statement<[string], { n: number }>;
    consumerNames: Database.Statement<[string], { name: string }>;
    consumer: Database.Statement<[string, string], { cursor: number }>;
    countConsumers: Database.Statement<[string, string], { n: number }>;
    addConsumer: Database.Statement<[string, string, number]>;
    touch: Database.Statement<[number, string, string]>;
    insert: Database.Statement<[string, string, string, Buffer, number]>;
    due: Database.Statement<[string, string, number, string, number], { n: number }>;
    claimAgain: Database.Statement<[number, string, string, string, string, number, number], { seq: number; deliveries: number }>;
    claimNew: Database.Statement<[string, number, number], { seq: number }>;
    addInflight: Database.Statement<[string, string, number, number]>;
    setCursor: Database.Statement<[number, string, string]>;
    message: Database.Statement<[number], { id: string; header: string; body: Buffer }>;
    ack: Database.Statement<[string, string, number]>;
    collectOne: Database.Statement<[number, string, number, string, number]>;
    collect: Database.Statement<[string, string]>;
    nack: Database.Statement<[number, string, string, number]>;
    pending: Database.Statement<[string, string, string, string, string], { n: number }>;
    expire: Database.Statement<[number]>;
    bytes: Database.Statement<[string], { n: number }>;
    dropOldest: Database.Statement<[string, number], { n: number }>;
    list: Database.Statement<[string, string, string, string, string, number], { seq: number; id: string; header: string; body: Buffer }>;
    listConsumers: Database.Statement<[string], { name: string; cursor: number; active_at: number }>;
    removeConsumer: Database.Statement<[string, string], { name: string }>;
    dropInflight: Database.Statement<[string, string]>;
    idle: Database.Statement<[string, number], { topic: string; name: string }>;
  };
  private readonly running = new Set<Running>();
  /** The pending gauge's last count and trailing re-count per topic and consumer (see pendingCheck). */
  private readonly pendingChecks = new Map<string, { last: number; timer?: NodeJS.Timeout }>();
  /** Per topic: when its names' pending gauges were last looked at after a publish. */
  private readonly topicChecks = new Map<string, { last: number; timer?: NodeJS.Timeout }>();
  /** Per topic: when drops were last logged and how many since. */
  private readonly dropLogs = new Map<string, { at: number; count: number }>();
  private readonly pollMs: number;
  /** How often a running subscriber marks its consumer active, and idle consumers are looked for. */
  private readonly touchMs: number;
  private sweepTimer?: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly options: OutboxOptions) {
    this.pollMs = options.pollMs ?? 50;
    const threshold = options.defaults.inactiveThresholdMs;
    this.touchMs = threshold > 0 ? Math.min(TOUCH_MS, Math.max(Math.floor(threshold / 4), 1)) : TOUCH_MS;
    try {
      // Private to its user, as the registry's files (src/base/util/private-files.ts).
      privateDirectory(options.directory, options.logger);
      const file = (this.file = join(options.directory, OUTBOX_FILE));
      closeSync(openSync(file, 'a', PRIVATE_FILE_MODE));
      privateFiles([file, `${file}-wal`, `${file}-shm`], options.logger);
      const shm = shmWriteProblem(file);
      if (shm) throw shm;
      this.db = new Database(file);
      this.db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = NORMAL');
      openSchema(this.db);
      // A file whose byte counts were lost (the table dropped by hand) is counted again from its rows.
      const counted = this.db.prepare('SELECT count(*) AS n FROM topic_bytes').get() as { n: number };
      if (counted.n === 0) this.db.exec(`INSERT OR REPLACE INTO topic_bytes (topic, bytes) SELECT topic, sum(${ROW_BYTES('messages')}) FROM messages GROUP BY topic`);
    } catch (err) {
      throw new BrokerUnavailableError(`http broker: cannot open the durable outbox ${join(options.directory, OUTBOX_FILE)}: ${(err as Error).message}`);
    }
    const db = this.db;
    const cast = <T>(st: Database.Statement): T => st as unknown as T;
    this.statements = {
      hasConsumers: db.prepare('SELECT EXISTS (SELECT 1 FROM consumers WHERE topic = ?) AS n'),
      consumerNames: db.prepare('SELECT name FROM consumers WHERE topic = ?'),
      consumer: db.prepare('SELECT cursor FROM consumers WHERE topic = ? AND name = ?'),
      countConsumers: db.prepare('SELECT count(*) AS n FROM consumers WHERE topic = ? AND name != ?'),
      addConsumer: db.prepare('INSERT OR IGNORE INTO consumers (topic, name, cursor, active_at) VALUES (?, ?, (SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = \'messages\'), 0)), ?)'),
      touch: cast(db.prepare('UPDATE consumers SET active_at = ? WHERE topic = ? AND name = ?')),
      insert: db.prepare('INSERT INTO messages (topic, id, header, body, published_at) VALUES (?, ?, ?, ?, ?)'),
      due: cast(db.prepare(
        `SELECT (EXISTS (SELECT 1 FROM inflight WHERE topic = ? AND consumer = ? AND visible_at <= ?)
              OR EXISTS (SELECT 1 FROM messages WHERE topic = ? AND seq > ?)) AS n`,
      )),
      claimAgain: cast(db.prepare(
        `UPDATE inflight SET deliveries = deliveries + 1, visible_at = ? WHERE topic = ? AND consumer = ? AND seq IN (
           SELECT seq FROM inflight WHERE topic = ? AND consumer = ? AND visible_at <= ? ORDER BY seq LIMIT ?)
         RETURNING seq, deliveries`,
      )),
      claimNew: db.prepare('SELECT seq FROM messages WHERE topic = ? AND seq > ? ORDER BY seq LIMIT ?'),
      addInflight: cast(db.prepare('INSERT OR IGNORE INTO inflight (topic, consumer, seq, deliveries, visible_at) VALUES (?, ?, ?, 1, ?)')),
      setCursor: cast(db.prepare('UPDATE consumers SET cursor = max(cursor, ?) WHERE topic = ? AND name = ?')),
      message: db.prepare('SELECT id, header, body FROM messages WHERE seq = ?'),
      ack: cast(db.prepare('DELETE FROM inflight WHERE topic = ? AND consumer = ? AND seq = ?')),
      // The message once no consumer of its topic is before it nor has it inflight.
      collectOne: cast(db.prepare(
        `DELETE FROM messages WHERE seq = ?
           AND NOT EXISTS (SELECT 1 FROM inflight WHERE topic = ? AND seq = ?)
           AND NOT EXISTS (SELECT 1 FROM consumers WHERE topic = ? AND cursor < ?)`,
      )),
      collect: cast(db.prepare(
        `DELETE FROM messages WHERE topic = ?
           AND seq <= coalesce((SELECT min(cursor) FROM consumers WHERE topic = ?), 9223372036854775807)
           AND NOT EXISTS (SELECT 1 FROM inflight i WHERE i.topic = messages.topic AND i.seq = messages.seq)`,
      )),
      nack: cast(db.prepare('UPDATE inflight SET visible_at = ? WHERE topic = ? AND consumer = ? AND seq = ?')),
      pending: cast(db.prepare(
        `SELECT (SELECT count(*) FROM inflight WHERE topic = ? AND consumer = ?)
              + (SELECT count(*) FROM messages WHERE topic = ? AND seq > (SELECT cursor FROM consumers WHERE topic = ? AND name = ?)) AS n`,
      )),
      expire: db.prepare('DELETE FROM messages WHERE published_at < ?'),
      bytes: db.prepare('SELECT bytes AS n FROM topic_bytes WHERE topic = ?'),
      dropOldest: cast(db.prepare(
        `DELETE FROM messages WHERE seq = (SELECT min(seq) FROM messages WHERE topic = ? AND seq < ?) RETURNING ${ROW_BYTES('messages')} AS n`,
      )),
      // A consumer's messages in order: those it has inflight and those after its cursor.
      list: cast(db.prepare(
        `SELECT seq, id, header, body FROM messages WHERE topic = ? AND (
           seq IN (SELECT seq FROM inflight WHERE topic = ? AND consumer = ?)
           OR seq > (SELECT cursor FROM consumers WHERE topic = ? AND name = ?)) ORDER BY seq LIMIT ?`,
      )),
      listConsumers: db.prepare('SELECT name, cursor, active_at FROM consumers WHERE topic = ? ORDER BY name'),
      removeConsumer: cast(db.prepare('DELETE FROM consumers WHERE topic = ? AND name = ? RETURNING name')),
      dropInflight: cast(db.prepare('DELETE FROM inflight WHERE topic = ? AND consumer = ?')),
      idle: cast(db.prepare('SELECT topic, name FROM consumers WHERE name != ? AND active_at < ?')),
    };
    if (threshold > 0) {
      this.sweepIdle();
      this.sweepTimer = setInterval(() => this.sweepIdle(), this.touchMs);
      this.sweepTimer.unref();
    }
  }

  /**
   * The statements, once the -shm file is known to take writes: SQLite writes through its mapping
   * of that file on reads too, and into a file that refuses writes (`chattr +i`) that is SIGBUS, not
   * an error. Throws BrokerUnavailableError then (logged once, and once when it is back).
   */
  private get st(): Outbox['statements'] {
    const problem = shmWriteProblem(this.file);
    if (problem) {
      if (this.shmProblem === undefined) this.options.logger.error({ path: this.file, error: problem.message }, 'http broker: the durable outbox cannot be used until its -shm file takes writes again');
      this.shmProblem = problem.message;
      throw new BrokerUnavailableError(`http broker: durable outbox unavailable: ${problem.message}`);
    }
    if (this.shmProblem !== undefined) {
      this.shmProblem = undefined;
      this.options.logger.info({ path: this.file }, 'http broker: the durable outbox takes writes again');
    }
    return this.statements;
  }

  /** A transaction of the database, once the -shm file is known to take writes (BEGIN writes through it too). */
  private transaction<F extends (...args: never[]) => unknown>(fn: F): Database.Transaction<F> {
    void this.st;
    return this.db.transaction(fn);
  }

  /** Stores the message once for the consumers of the topic; returns the header to deliver plainly (with Mesh-Id when stored). */
  store(topic: string, header: Record<string, string>, body: Uint8Array): Record<string, string> {
    if (this.closed) throw new BrokerUnavailableError('http broker: closed');
    if (!this.st.hasConsumers.get(topic)?.n) return header;
    const withId = withMessageId(header);
    const json = JSON.stringify(withId.header);
    const buf = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    const maxBytes = this.options.defaults.maxBytes;
    let dropped = 0;
    // Checked again under the write lock: the last consumer may have gone meanwhile.
    const stored = this.transaction(() => {
      if (!this.st.hasConsumers.get(topic)?.n) return false;
      const seq = Number(this.st.insert.run(topic, withId.id, json, buf, Date.now()).lastInsertRowid);
      if (maxBytes > 0) dropped = this.dropOverBudget(topic, seq, maxBytes);
      return true;
    }).immediate();
    if (!stored) return header;
    this.options.stats.topic(topic)?.published.inc();
    if (dropped > 0) this.dropped(topic, dropped);
    this.topicPendingCheck(topic);
    for (const r of this.running) if (r.topic === topic) r.wake();
    return withId.header;
  }

  /** The dead letters of a topic (what the `dlq` keeper of `<topic>.dlq` holds), oldest first. */
  listDeadLetters(topic: string, limit: number): Array<{ seq: number; message: Message }> {
    if (this.closed) throw new BrokerUnavailableError('http broker: closed');
    const dlq = topic + this.options.defaults.dlqSuffix;
    return this.st.list.all(dlq, dlq, DLQ_KEEPER, dlq, DLQ_KEEPER, limit).map((r) => ({
      seq: r.seq,
      message: { header: JSON.parse(r.header) as Record<string, string>, body: new Uint8Array(r.body), id: r.id },
    }));
  }

  /** Publishes the dead letters to the topic again, each removed once published. */
  async replayDeadLetters(topic: string, limit: number): Promise<number> {
    const dlq = topic + this.options.defaults.dlqSuffix;
    let n = 0;
    for (const { seq, message } of this.listDeadLetters(topic, limit)) {
      await this.options.publish(topic, replayed(message));
      // Listed in order: everything of the keeper before seq was replayed already.
      this.transaction(() => {
        this.st.ack.run(dlq, DLQ_KEEPER, seq);
        this.st.setCursor.run(seq, dlq, DLQ_KEEPER);
        this.st.collectOne.run(seq, dlq, seq, dlq, seq);
      })();
      n++;
    }
    return n;
  }

  /** The durable consumer names of a topic (idle ones past the threshold removed first), by name. */
  listConsumers(topic: string): ConsumerInfo[] {
    if (this.closed) throw new BrokerUnavailableError('http broker: closed');
    this.sweepIdle();
    return this.st.listConsumers.all(topic).map((c) => ({ name: c.name, pending: this.st.pending.get(topic, c.name, topic, topic, c.name)?.n ?? 0, lastActive: c.active_at }));
  }

  /** Removes a consumer name of a topic and the messages kept only for it; false when it has none of that name. */
  removeConsumer(topic: string, name: string): boolean {
    if (this.closed) throw new BrokerUnavailableError('http broker: closed');
    return this.transaction(() => {
      if (this.st.removeConsumer.all(topic, name).length === 0) return false;
      this.st.dropInflight.run(topic, name);
      this.st.collect.run(topic, topic);
      return true;
    }).immediate();
  }

  /** Removes the consumers idle past the inactive threshold (not a `.dlq` topic's keeper), and what they alone kept. */
  private sweepIdle(): void {
    const threshold = this.options.defaults.inactiveThresholdMs;
    if (threshold <= 0 || this.closed) return;
    try {
      const idle = this.st.idle.all(DLQ_KEEPER, Date.now() - threshold);
      for (const c of idle) {
        const removed = this.transaction(() => {
          // Checked again under the write lock: a subscriber may have marked it active meanwhile.
          const still = this.st.idle.all(DLQ_KEEPER, Date.now() - threshold).some((x) => x.topic === c.topic && x.name === c.name);
          if (!still) return false;
          return this.removeConsumer(c.topic, c.name);
        }).immediate();
        if (removed) this.options.logger.info({ topic: c.topic, durable: c.name, inactiveThresholdMs: threshold }, 'http broker: durable consumer removed after the inactive threshold');
      }
    } catch (err) {
      this.options.logger.warn({ error: (err as Error).message }, 'http broker: removing idle durable consumers failed');
    }
  }

  /**
   * Registers a consumer name of the topic (refused past maxConsumers names), or marks it active.
   * The `.dlq` topic's keeper is registered with it, outside the count.
   */
  private register(topic: string, name: string): void {
    const max = this.options.defaults.maxConsumers;
    this.transaction(() => {
      const now = Date.now();
      if (!this.st.consumer.get(topic, name)) {
        if (name !== DLQ_KEEPER && (this.st.countConsumers.get(topic, DLQ_KEEPER)?.n ?? 0) >= max) throw tooManyConsumers(topic, max);
        this.st.addConsumer.run(topic, name, now);
      } else this.st.touch.run(now, topic, name);
      // Its dead-letter topic keeps what is dead-lettered (for `dlq`, until replayed) even before anyone reads it.
      this.st.addConsumer.run(topic + this.options.defaults.dlqSuffix, DLQ_KEEPER, now);
    }).immediate();
  }

  /**
   * Takes the consumer's due messages, at most room: its inflight rows due again, then the
   * messages after its cursor (the cursor moves past them), each counted as an attempt and
   * invisible for the ack wait. A consumer removed meanwhile (idle, or `mesh consumers rm`)
   * while this subscriber runs is registered again, from the latest message on.
   */
  private claim(topic: string, name: string, ackWaitMs: number, room: number): Row[] {
    const now = Date.now();
    return this.transaction(() => {
      let cursor = this.st.consumer.get(topic, name)?.cursor;
      if (cursor === undefined) {
        this.st.addConsumer.run(topic, name, now);
        cursor = this.st.consumer.get(topic, name)!.cursor;
        this.options.logger.warn({ topic, durable: name }, 'http broker: durable consumer was removed while subscribed; registered again (from the latest message)');
      }
      const out: Row[] = [];
      const again = this.st.claimAgain.all(now + ackWaitMs, topic, name, topic, name, now, room);
      const fresh = room > again.length ? this.st.claimNew.all(topic, cursor, room - again.length) : [];
      for (const f of fresh) this.st.addInflight.run(topic, name, f.seq, now + ackWaitMs);
      if (fresh.length > 0) this.st.setCursor.run(fresh[fresh.length - 1]!.seq, topic, name);
      for (const r of [...again, ...fresh.map((f) => ({ seq: f.seq, deliveries: 1 }))]) {
        const m = this.st.message.get(r.seq);
        if (m) out.push({ seq: r.seq, id: m.id, header: m.header, body: m.body, deliveries: r.deliveries });
        else this.st.ack.run(topic, name, r.seq);
      }
      return out;
    }).immediate();
  }

  /** A durable subscription: registers the consumer and handles its due messages until unsubscribed. */
  subscribe(topic: string, handler: MessageHandler, settings: DurableSettings, queue: string | undefined): Subscription {
    if (this.closed) throw new BrokerUnavailableError('http broker: closed');
    this.register(topic, settings.name);
    const stats = this.options.stats.consumer(settings.name);
    const logger = this.options.logger;
    let active = true;
    let timer: NodeJS.Timeout | undefined;
    let woken = false;
    let touchedAt = Date.now();
    const inflight = new Set<Promise<void>>();
    const ack = (seq: number): void => {
      if (this.closed) return;
      this.transaction(() => {
        this.st.ack.run(topic, settings.name, seq);
        this.st.collectOne.run(seq, topic, seq, topic, seq);
      })();
    };
    const nack = (seq: number, deliveries: number): void => {
      if (!this.closed) this.st.nack.run(Date.now() + nackDelayMs(deliveries, settings.ackWaitMs), topic, settings.name, seq);
    };
    const handle = async (row: Row): Promise<void> => {
      const header = JSON.parse(row.header) as Record<string, string>;
      const message: Message = { header, body: new Uint8Array(row.body), id: row.id, deliveryCount: row.deliveries };
      stats?.delivered.inc();
      if (row.deliveries > 1) stats?.redelivered.inc();
      let error: string | undefined;
      let deliveries = row.deliveries;
      if (row.deliveries > settings.maxDeliver) {
        error = 'not acknowledged within the ack wait';
        deliveries--;
      } else {
        error = await runDurable(handler, message, topic);
        if (error === undefined) {
          ack(row.seq);
          stats?.acked.inc();
          return;
        }
        logger.warn({ topic, durable: settings.name, id: row.id, deliveryCount: row.deliveries, error }, 'http broker: durable handler failed');
        if (row.deliveries < settings.maxDeliver) {
          nack(row.seq, row.deliveries);
          return;
        }
      }
      const dlq = topic + this.options.defaults.dlqSuffix;
      try {
        await this.options.publish(dlq, deadLetter(message, topic, settings.name, deliveries, error));
      } catch (err) {
        logger.warn({ topic, durable: settings.name, error: (err as Error).message }, 'http broker: dead-lettering failed, will retry');
        nack(row.seq, row.deliveries);
        return;
      }
      ack(row.seq);
      stats?.dead_lettered.inc();
      this.options.stats.topic(topic)?.dead_lettered.inc();
      logger.warn({ topic, durable: settings.name, id: row.id, deliveries, dlq }, 'http broker: message dead-lettered');
    };
    const poll = (): void => {
      timer = undefined;
      woken = false;
      if (!active || this.closed) return;
      let rows: Row[] = [];
      const room = CLAIM_BATCH - inflight.size;
      // A running subscriber keeps its consumer from the inactive threshold, even with every handler busy.
      if (Date.now() - touchedAt >= this.touchMs) {
        touchedAt = Date.now();
        try {
          this.st.touch.run(touchedAt, topic, settings.name);
        } catch (err) {
          logger.warn({ topic, durable: settings.name, error: (err as Error).message }, 'http broker: marking the durable consumer active failed');
        }
      }
      if (room > 0) {
        try {
          const now = Date.now();
          const cursor = this.st.consumer.get(topic, settings.name)?.cursor;
          // The write lock only when there is something to take.
          if (cursor === undefined || this.st.due.get(topic, settings.name, now, topic, cursor)?.n) rows = this.claim(topic, settings.name, settings.ackWaitMs, room);
          if (this.options.defaults.maxAgeMs > 0 && Math.random() < 0.01) this.st.expire.run(now - this.options.defaults.maxAgeMs);
          this.pendingCheck(topic, settings.name);
        } catch (err) {
          // An outbox whose -shm file refuses writes was said once (st); the polls go on quietly until it is back.
          if (this.shmProblem === undefined) logger.warn({ topic, durable: settings.name, error: (err as Error).message }, 'http broker: reading the durable outbox failed');
        }
      }
      for (const row of rows) {
        const p: Promise<void> = handle(row)
          .catch((err: unknown) => logger.warn({ topic, durable: settings.name, error: (err as Error).message }, 'http broker: durable delivery failed'))
          .finally(() => {
            inflight.delete(p);
            wake();
          });
        inflight.add(p);
      }
      // More may be due at once when a full batch came; else wait for a wake-up or the poll interval.
      schedule(rows.length === room && room > 0 ? 0 : this.pollMs);
    };
    const schedule = (ms: number): void => {
      if (!active || this.closed) return;
      if (timer) {
        if (ms > 0) return;
        clearTimeout(timer);
      }
      timer = setTimeout(poll, ms);
    };
    const wake = (): void => {
      if (woken) return;
      woken = true;
      schedule(0);
    };
    const running: Running = {
      topic,
      wake,
      stop: async () => {
        if (!active) return;
        active = false;
        this.running.delete(running);
        if (timer) clearTimeout(timer);
        timer = undefined;
        // Handlers under way get a moment to finish (and ack); rows never answered come again
        // after the ack wait.
        let bound: NodeJS.Timeout | undefined;
        await Promise.race([Promise.allSettled([...inflight]), new Promise<void>((r) => (bound = setTimeout(r, 1000)))]);
        clearTimeout(bound);
        // Idle from now on: the inactive threshold counts from the stop.
        try {
          if (!this.closed) this.st.touch.run(Date.now(), topic, settings.name);
        } catch (err) {
          logger.warn({ topic, durable: settings.name, error: (err as Error).message }, 'http broker: marking the durable consumer stopped failed');
        }
      },
    };
    this.running.add(running);
    schedule(0);
    return { topic, queue, durable: settings.name, unsubscribe: running.stop };
  }

  /**
   * Drops the topic's oldest messages (delivered or not) while it stores more than maxBytes,
   * never the message just stored (seq); returns how many were dropped.
   */
  private dropOverBudget(topic: string, seq: number, maxBytes: number): number {
    let bytes = this.st.bytes.get(topic)?.n ?? 0;
    let n = 0;
    while (bytes > maxBytes) {
      const row = this.st.dropOldest.get(topic, seq);
      if (!row) break;
      bytes -= row.n;
      n++;
    }
    return n;
  }

  /** Counts dropped rows (`broker.topic.<topic>.dropped`) and logs them, at most once a minute per topic. */
  private dropped(topic: string, n: number): void {
    this.options.stats.topic(topic)?.dropped.inc(n);
    const now = Date.now();
    const log = this.dropLogs.get(topic) ?? { at: 0, count: 0 };
    log.count += n;
    if (!this.dropLogs.has(topic)) {
      if (this.dropLogs.size >= MAX_PENDING_CHECKS) this.dropLogs.clear();
      this.dropLogs.set(topic, log);
    }
    if (now - log.at < DROP_LOG_MS) return;
    this.options.logger.warn({ topic, dropped: log.count, maxBytes: this.options.defaults.maxBytes }, 'http broker: oldest durable messages dropped (over --broker_stream_max_bytes)');
    log.at = now;
    log.count = 0;
  }

  /**
   * After a publish: the pending gauges of the topic's names, looked at at most once a second per
   * topic (a publish within the second is looked at at its end).
   */
  private topicPendingCheck(topic: string): void {
    if (!this.options.stats.enabled || this.closed) return;
    let check = this.topicChecks.get(topic);
    if (check?.timer) return;
    if (!check) {
      if (this.topicChecks.size >= MAX_PENDING_CHECKS) return;
      this.topicChecks.set(topic, (check = { last: 0 }));
    }
    const look = (): void => {
      check.timer = undefined;
      if (this.closed) return;
      check.last = Date.now();
      try {
        for (const c of this.st.consumerNames.all(topic)) if (c.name !== DLQ_KEEPER) this.pendingCheck(topic, c.name);
      } catch (err) {
        this.options.logger.warn({ topic, error: (err as Error).message }, 'http broker: counting pending messages failed');
      }
    };
    const wait = check.last + PENDING_CHECK_MS - Date.now();
    if (wait <= 0) look();
    else (check.timer = setTimeout(look, wait)).unref();
  }

  /**
   * Sets the consumer's `pending` gauge to its stored rows (not yet acknowledged) for the topic:
   * after a publish to the topic or a poll of its subscription in this process, at most once a
   * second (a check within the second is done at its end), so a stopped consumer's backlog shows.
   */
  private pendingCheck(topic: string, consumer: string): void {
    const gauge = this.options.stats.consumer(consumer)?.pending;
    if (!gauge || this.closed) return;
    const key = `${topic}\0${consumer}`;
    let check = this.pendingChecks.get(key);
    if (check?.timer) return;
    if (!check) {
      if (this.pendingChecks.size >= MAX_PENDING_CHECKS) return;
      this.pendingChecks.set(key, (check = { last: 0 }));
    }
    const count = (): void => {
      check.timer = undefined;
      if (this.closed) return;
      check.last = Date.now();
      try {
        gauge.set(this.st.pending.get(topic, consumer, topic, topic, consumer)?.n ?? 0);
      } catch (err) {
        if (this.shmProblem === undefined) this.options.logger.warn({ topic, durable: consumer, error: (err as Error).message }, 'http broker: counting pending messages failed');
      }
    };
    const wait = check.last + PENDING_CHECK_MS - Date.now();
    if (wait <= 0) count();
    else (check.timer = setTimeout(count, wait)).unref();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    clearInterval(this.sweepTimer);
    await Promise.all([...this.running].map((r) => r.stop()));
    this.closed = true;
    for (const check of [...this.pendingChecks.values(), ...this.topicChecks.values()]) clearTimeout(check.timer);
    // Closing checkpoints through the -shm mapping: while it refuses writes the connection is left to the process's exit.
    if (!shmWriteProblem(this.file)) this.db.close();
  }
}
