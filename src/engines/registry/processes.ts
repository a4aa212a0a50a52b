/**
 * Process records: each mesh process that serves an admin interface records itself in the
 * registry, so that `mesh ps`, `mesh stop` and `mesh tap` find the processes of a mesh without
 * being told their addresses (docs/cli.md, "The processes of a mesh"). A record is a node of the
 * reserved service PROCESS_SERVICE (./validate.ts: stored by every backend, listed by none,
 * never a destination): its address and port are the admin's, its metadata says the rest.
 *
 * Records are outside input when read (anyone who can write the registry can write one):
 * readProcessRecords skips a node whose fields do not parse and says why.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Node, Registry, Service } from './registry.js';
import { PROCESS_SERVICE } from './validate.js';
import { printable } from '../../base/util/text.js';

/** What `mesh ps` shows of one process. */
export interface ProcessRecord {
  /** Unique per process start: `<host>-<pid>-<random>`. */
  id: string;
  /** The command that runs it: dev, api, sidecar, proxy, run, xds. */
  kind: string;
  /** The service a sidecar or `mesh run` speaks for; empty for the others. */
  name: string;
  pid: number;
  /** The machine's host name. */
  host: string;
  /** The admin interface: where /tap, /stats and /quitquitquit are. */
  admin: { address: string; port: number };
  /** Epoch ms of the start. */
  startedMs: number;
  /** The mutual TLS mode of its listeners: strict, permissive or off. */
  mtls: string;
  /** Its listeners, `name=host:port`, in the order they were bound. */
  listeners: string[];
  /** mesh's version. */
  version: string;
}

/** How long a record lives without being written again, and how often it is written. */
export const PROCESS_TTL_MS = 30_000;
export const PROCESS_REFRESH_MS = 10_000;

/** A new process id: the host, the pid and 6 random hex digits (a pid is reused; a record outlives its process by up to the TTL). */
export function newProcessId(pid = process.pid, host = hostname()): string {
  // A valid node id (./validate.ts): letters, digits, `.` and `-`, starting with a letter or a digit, never `..`.
  const h = host.replace(/[^A-Za-z0-9.-]/g, '-').replace(/\.{2,}/g, '.').replace(/^[^A-Za-z0-9]+/, '').slice(0, 64) || 'host';
  return `${h}-${pid}-${randomBytes(3).toString('hex')}`;
}

/** The registry record of a process. */
export function processService(record: ProcessRecord): Service {
  const node: Node = {
    id: record.id,
    address: record.admin.address,
    port: record.admin.port,
    metadata: {
      kind: record.kind,
      name: record.name,
      pid: String(record.pid),
      host: record.host,
      started: String(record.startedMs),
      mtls: record.mtls,
      listeners: record.listeners.join(','),
      version: record.version,
    },
  };
  return { name: PROCESS_SERVICE, version: '', metadata: {}, endpoints: [], nodes: [node] };
}

const KIND_RE = /^[a-z][a-z0-9-]{0,31}$/;
const INT_RE = /^[0-9]{1,15}$/;

/** A record read back from a node, or why it is skipped. */
export function processOfNode(node: Node): ProcessRecord | { skipped: string } {
  const m = node.metadata ?? {};
  const why = (what: string) => ({ skipped: `process record ${printable(node.id)}: ${what}` });
  if (!KIND_RE.test(m.kind ?? '')) return why(`kind ${JSON.stringify(printable(m.kind ?? ''))} is not a command name`);
  if (!INT_RE.test(m.pid ?? '') || Number(m.pid) < 1) return why(`pid ${JSON.stringify(printable(m.pid ?? ''))} is not a process id`);
  if (!INT_RE.test(m.started ?? '')) return why(`started ${JSON.stringify(printable(m.started ?? ''))} is not epoch milliseconds`);
  return {
    id: node.id,
    kind: m.kind!,
    name: m.name ?? '',
    pid: Number(m.pid),
    host: m.host ?? '',
    admin: { address: node.address, port: node.port },
    startedMs: Number(m.started),
    mtls: m.mtls ?? '',
    listeners: (m.listeners ?? '').split(',').filter((l) => l !== ''),
    version: m.version ?? '',
  };
}

/**
 * Keeps one process's record in the registry: written at start, again every PROCESS_REFRESH_MS
 * (with what `read` says then: listeners bound since are in it) and when `changed()` is called;
 * deregistered at stop. A registry that cannot be written is logged once per outage, never fatal:
 * the process serves without its record.
 */
export class ProcessRecorder {
  private timer: NodeJS.Timeout | undefined;
  private failing = false;
  private stopped = false;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private readonly registry: Pick<Registry, 'register' | 'deregister'>,
    private readonly read: () => ProcessRecord,
    private readonly log: Logger,
  ) {}

  /** Writes the record now and keeps it written. */
  start(): Promise<void> {
    this.timer = setInterval(() => void this.changed(), PROCESS_REFRESH_MS);
    this.timer.unref();
    return this.changed();
  }

  /** Writes the record again (a listener was bound); writes never overlap. */
  changed(): Promise<void> {
    this.writing = this.writing.then(async () => {
      if (this.stopped) return;
      try {
        await this.registry.register(processService(this.read()), { ttlMs: PROCESS_TTL_MS });
        if (this.failing) this.log.info('process record written again');
        this.failing = false;
      } catch (err) {
        if (!this.failing) this.log.warn({ err: (err as Error).message }, 'cannot write this process\'s record in the registry (mesh ps will not list it)');
        this.failing = true;
      }
    });
    return this.writing;
  }

  /** Removes the record (shutdown). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.writing;
    try {
      await this.registry.deregister(processService(this.read()));
    } catch (err) {
      this.log.debug({ err: (err as Error).message }, 'process record not removed (it expires)');
    }
  }
}
