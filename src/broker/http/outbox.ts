/**
 * The http broker's durable subscriptions on one machine: an outbox in SQLite (`broker.db`, a
 * sibling of the local registry's database in its directory), shared by every process using the
 * directory.
 *
 * - A durable subscription registers its consumer (topic, name) in the file; it stays registered
 *   after the subscriber stops, so messages are kept for it.
 * - A publish to a topic with consumers stores one row per consumer (with `Mesh-Id`, set when
 *   absent) before it resolves, in one transaction.
 * - Each running subscriber of a name claims due rows (an UPDATE ... RETURNING under SQLite's write
 *   lock: two processes never claim the same row at once), marks them invisible for the ack wait
 *   and counts the attempt; its handler returning deletes the row (ack), a throw makes it due again
 *   after the backoff (nack); a row not answered within the ack wait (the subscriber died) is due
 *   again by itself. After maxDeliver attempts the message is published to the dead-letter topic.
 * - Subscribers look for due rows every pollMs (50 ms) while idle, at once when this process
 *   published to the topic. Rows older than the max age are dropped.
 */
import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { shmWriteProblem } from '../../util/sqlite-shm.js';
import type pino from 'pino';
import { BrokerUnavailableError, type Message, type MessageHandler, type Subscription } from '../broker.js';
import { deadLetter, DLQ_KEEPER, nackDelayMs, replayed, runDurable, withMessageId, type DurableDefaults, type DurableSettings, type DurableStats } from '../durable.js';

export const OUTBOX_FILE = 'broker.db';
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

export class Outbox {
  private readonly db: Database.Database;
  private readonly st: {
    consumers: Database.Statement<[string], { name: string }>;
    addConsumer: Database.Statement<[string, string]>;
    insert: Database.Statement<[string, string, string, string, Buffer, number, number]>;
    claim: Database.Statement<[number, string, string, number, number], Row>;
    ack: Database.Statement<[number]>;
    nack: Database.Statement<[number, number]>;
    pending: Database.Statement<[string, string], { n: number }>;
    expire: Database.Statement<[number]>;
    bytes: Database.Statement<[string, string], { n: number }>;
    dropOldest: Database.Statement<[string, string, number], { n: number }>;
    list: Database.Statement<[string, string, number], { seq: number; id: string; header: string; body: Buffer }>;
  };
  private readonly running = new Set<Running>();
  /** The pending gauge's last count and trailing re-count per topic and consumer (see pendingCheck). */
  private readonly pendingChecks = new Map<string, { last: number; timer?: NodeJS.Timeout }>();
  /** Per topic: when drops were last logged and how many since. */
  private readonly dropLogs = new Map<string, { at: number; count: number }>();
  private readonly pollMs: number;
  private closed = false;
  private readonly file: string;
  /** Why the -shm file refuses writes, while it does (see sql()). */
  private shmProblem: string | undefined;

  constructor(private readonly options: OutboxOptions) {
    this.pollMs = options.pollMs ?? 50;
    this.file = join(options.directory, OUTBOX_FILE);
    try {
      mkdirSync(options.directory, { recursive: true });
      const shm = shmWriteProblem(this.file);
      if (shm) throw shm;
      this.db = new Database(this.file);
      this.db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = NORMAL');
      this.db.exec(`
        CREATE TABLE IF NOT EXISTS consumers (topic TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (topic, name));
        CREATE TABLE IF NOT EXISTS messages (
          seq INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, consumer TEXT NOT NULL, id TEXT NOT NULL,
          header TEXT NOT NULL, body BLOB NOT NULL, deliveries INTEGER NOT NULL DEFAULT 0,
          visible_at INTEGER NOT NULL, published_at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS messages_due ON messages (topic, consumer, visible_at);
      `);
      // The bytes stored per topic and consumer (header and body), kept by triggers for
      // --broker_stream_max_bytes; counted from the rows when the table is new (an older file).
      this.db.transaction(() => {
        const fresh = this.db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'backlog'").get() === undefined;
        this.db.exec(`
          CREATE TABLE IF NOT EXISTS backlog (topic TEXT NOT NULL, consumer TEXT NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY (topic, consumer));
          CREATE TRIGGER IF NOT EXISTS backlog_insert AFTER INSERT ON messages BEGIN
            INSERT INTO backlog (topic, consumer, bytes) VALUES (NEW.topic, NEW.consumer, ${ROW_BYTES('NEW')})
            ON CONFLICT (topic, consumer) DO UPDATE SET bytes = bytes + excluded.bytes;
          END;
          CREATE TRIGGER IF NOT EXISTS backlog_delete AFTER DELETE ON messages BEGIN
            UPDATE backlog SET bytes = bytes - ${ROW_BYTES('OLD')} WHERE topic = OLD.topic AND consumer = OLD.consumer;
          END;
        `);
        if (fresh) this.db.exec(`INSERT INTO backlog (topic, consumer, bytes) SELECT topic, consumer, sum(${ROW_BYTES('messages')}) FROM messages GROUP BY topic, consumer`);
      }).immediate();
    } catch (err) {
      throw new BrokerUnavailableError(`http broker: cannot open the durable outbox in ${options.directory}: ${(err as Error).message}`);
    }
    const db = this.db;
    this.st = {
      consumers: db.prepare('SELECT name FROM consumers WHERE topic = ?'),
      addConsumer: db.prepare('INSERT OR IGNORE INTO consumers (topic, name) VALUES (?, ?)'),
      insert: db.prepare('INSERT INTO messages (topic, consumer, id, header, body, visible_at, published_at) VALUES (?, ?, ?, ?, ?, ?, ?)'),
      claim: db.prepare(
        `UPDATE messages SET deliveries = deliveries + 1, visible_at = ? WHERE seq IN (
           SELECT seq FROM messages WHERE topic = ? AND consumer = ? AND visible_at <= ? ORDER BY seq LIMIT ?)
         RETURNING seq, id, header, body, deliveries`,
      ) as unknown as Database.Statement<[number, string, string, number, number], Row>,
      ack: db.prepare('DELETE FROM messages WHERE seq = ?'),
      nack: db.prepare('UPDATE messages SET visible_at = ? WHERE seq = ?') as unknown as Database.Statement<[number, number]>,
      pending: db.prepare('SELECT count(*) AS n FROM messages WHERE topic = ? AND consumer = ?'),
      expire: db.prepare('DELETE FROM messages WHERE published_at < ?'),
      bytes: db.prepare('SELECT bytes AS n FROM backlog WHERE topic = ? AND consumer = ?'),
      dropOldest: db.prepare(
        `DELETE FROM messages WHERE seq = (SELECT min(seq) FROM messages WHERE topic = ? AND consumer = ? AND seq < ?) RETURNING ${ROW_BYTES('messages')} AS n`,
      ) as unknown as Database.Statement<[string, string, number], { n: number }>,
      list: db.prepare('SELECT seq, id, header, body FROM messages WHERE topic = ? AND consumer = ? ORDER BY seq LIMIT ?'),
    };
  }

  /**
   * The statements, once the -shm file is known to take writes: SQLite writes through its mapping
   * of that file on reads too, and into a file that refuses writes (`chattr +i`) that is SIGBUS, not
   * an error. Throws BrokerUnavailableError then (logged once, and once when it is back).
   */
  private sql(): Outbox['st'] {
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
    return this.st;
  }

  /** Stores the message for every consumer of the topic; returns the header to deliver plainly (with Mesh-Id when stored). */
  store(topic: string, header: Record<string, string>, body: Uint8Array): Record<string, string> {
    if (this.closed) throw new BrokerUnavailableError('http broker: closed');
    const st = this.sql();
    const consumers = st.consumers.all(topic);
    if (consumers.length === 0) return header;
    const withId = withMessageId(header);
    const now = Date.now();
    const json = JSON.stringify(withId.header);
    const buf = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    const maxBytes = this.options.defaults.maxBytes;
    let dropped = 0;
    this.db.transaction(() => {
      for (const c of consumers) {
        const seq = Number(st.insert.run(topic, c.name, withId.id, json, buf, now, now).lastInsertRowid);
        if (maxBytes > 0) dropped += this.dropOverBudget(topic, c.name, seq, maxBytes);
      }
    })();
    this.options.stats.topic(topic)?.published.inc();
    if (dropped > 0) this.dropped(topic, dropped);
    for (const c of consumers) if (c.name !== DLQ_KEEPER) this.pendingCheck(topic, c.name);
    for (const r of this.running) if (r.topic === topic) r.wake();
    return withId.header;
  }

  /** The dead letters of a topic (the `dlq` keeper's rows of `<topic>.dlq`), oldest first. */
  listDeadLetters(topic: string, limit: number): Array<{ seq: number; message: Message }> {
    if (this.closed) throw new BrokerUnavailableError('http broker: closed');
    return this.sql().list.all(topic + this.options.defaults.dlqSuffix, DLQ_KEEPER, limit).map((r) => ({
      seq: r.seq,
      message: { header: JSON.parse(r.header) as Record<string, string>, body: new Uint8Array(r.body), id: r.id },
    }));
  }

  /** Publishes the dead letters to the topic again, each removed once published. */
  async replayDeadLetters(topic: string, limit: number): Promise<number> {
    let n = 0;
    for (const { seq, message } of this.listDeadLetters(topic, limit)) {
      await this.options.publish(topic, replayed(message));
      this.sql().ack.run(seq);
      n++;
    }
    return n;
  }

  /** A durable subscription: registers the consumer and handles its due rows until unsubscribed. */
  subscribe(topic: string, handler: MessageHandler, settings: DurableSettings, queue: string | undefined): Subscription {
    if (this.closed) throw new BrokerUnavailableError('http broker: closed');
    this.sql().addConsumer.run(topic, settings.name);
    // Its dead-letter topic keeps what is dead-lettered (for `dlq`, until replayed) even before anyone reads it.
    this.sql().addConsumer.run(topic + this.options.defaults.dlqSuffix, DLQ_KEEPER);
    const stats = this.options.stats.consumer(settings.name);
    const logger = this.options.logger;
    let active = true;
    let timer: NodeJS.Timeout | undefined;
    let woken = false;
    const inflight = new Set<Promise<void>>();
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
          if (!this.closed) this.sql().ack.run(row.seq);
          stats?.acked.inc();
          return;
        }
        logger.warn({ topic, durable: settings.name, id: row.id, deliveryCount: row.deliveries, error }, 'http broker: durable handler failed');
        if (row.deliveries < settings.maxDeliver) {
          if (!this.closed) this.sql().nack.run(Date.now() + nackDelayMs(row.deliveries, settings.ackWaitMs), row.seq);
          return;
        }
      }
      const dlq = topic + this.options.defaults.dlqSuffix;
      try {
        await this.options.publish(dlq, deadLetter(message, topic, settings.name, deliveries, error));
      } catch (err) {
        logger.warn({ topic, durable: settings.name, error: (err as Error).message }, 'http broker: dead-lettering failed, will retry');
        if (!this.closed) this.sql().nack.run(Date.now() + nackDelayMs(row.deliveries, settings.ackWaitMs), row.seq);
        return;
      }
      if (!this.closed) this.sql().ack.run(row.seq);
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
      if (room > 0) {
        try {
          const now = Date.now();
          rows = this.sql().claim.all(now + settings.ackWaitMs, topic, settings.name, now, room);
          if (this.options.defaults.maxAgeMs > 0 && Math.random() < 0.01) this.sql().expire.run(now - this.options.defaults.maxAgeMs);
          this.pendingCheck(topic, settings.name);
        } catch (err) {
          // An outbox whose -shm file refuses writes was said once (sql()); the polls go on quietly until it is back.
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
      },
    };
    this.running.add(running);
    schedule(0);
    return { topic, queue, durable: settings.name, unsubscribe: running.stop };
  }

  /**
   * Drops the consumer's oldest rows of the topic (delivered or not) while it stores more than
   * maxBytes, never the message just stored (seq); returns how many were dropped.
   */
  private dropOverBudget(topic: string, consumer: string, seq: number, maxBytes: number): number {
    let bytes = this.sql().bytes.get(topic, consumer)?.n ?? 0;
    let n = 0;
    while (bytes > maxBytes) {
      const row = this.sql().dropOldest.get(topic, consumer, seq);
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
        gauge.set(this.sql().pending.get(topic, consumer)?.n ?? 0);
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
    await Promise.all([...this.running].map((r) => r.stop()));
    this.closed = true;
    for (const check of this.pendingChecks.values()) clearTimeout(check.timer);
    // Closing checkpoints through the -shm mapping: while it refuses writes the connection is left to the process's exit.
    if (!shmWriteProblem(this.file)) this.db.close();
  }
}
