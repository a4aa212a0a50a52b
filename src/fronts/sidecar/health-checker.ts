/**
 * The sidecar's app registration (`--server_name` + `--server_address`) and health checker
 * (`--healthcheck_url`), SPEC 3.3 and DESIGN 6.
 *
 * - The app is one node `{Id: <name>-<uuid>, Address, Port}` registered with a TTL, so a sidecar
 *   that dies without deregistering leaves no zombie behind.
 * - Without a health URL: registered at start, refreshed every --register_interval with
 *   --register_ttl.
 * - With a health URL: checked at start and then every --healthcheck_interval, each check bounded
 *   by --healthcheck_timeout. A 200 answer registers (or refreshes) the node; anything else (another
 *   status, a connection error, no answer in time) deregisters it. The TTL is --register_ttl when
 *   given, else 3 x interval + timeout, so a registration outlives two missed refreshes.
 * - While the admin says draining (/healthcheck/fail) the node is withdrawn and not registered
 *   again until /healthcheck/ok. On shutdown it is deregistered.
 */
import { redactUrl } from '../../base/util/redact.js';
import { addressProblem, serviceNameProblem } from '../../engines/registry/validate.js';
import { randomUUID } from 'node:crypto';
import { Agent, request } from '../../base/http/undici.js';
import type { Runtime } from '../../process/runtime.js';
import type { Service } from '../../engines/registry/registry.js';
import { formatDuration } from '../../base/util/duration.js';
import { formatAddress, isWildcard, parseAddress, type HostPort } from '../../base/util/address.js';
import { SchemaOptionError } from '../../base/util/option-error.js';

export interface AppOptions {
  name: string;
  /** host:port of the app, as given (validated by parseAppAddress). */
  address: string;
  healthcheckUrl?: string;
  intervalMs: number;
  timeoutMs: number;
  /** TTL of the registration. */
  ttlMs: number;
  /** How often the registration is refreshed when there is no health URL. */
  refreshMs: number;
  /**
   * The checks before the first healthy answer are logged at debug, not as a warning (mesh run: the
   * app is starting; it says itself when the app is slow to become healthy).
   */
  quietStart?: boolean;
  /** Any 2xx answer is healthy (mesh run), not only 200 (the sidecar's --healthcheck_url). */
  any2xx?: boolean;
}

/** Thrown for inconsistent app options; it carries the option's schema key (SchemaOptionError). */
export class AppFlagError extends SchemaOptionError {
  constructor(key: string, reason: string, value?: string | null) {
    super(key, reason, value);
    this.name = 'AppFlagError';
  }
}

/** Parses --server_address: an explicit, reachable host and a port 1..65535. */
export function parseAppAddress(text: string): HostPort {
  let parsed: HostPort;
  try {
    parsed = parseAddress(text, { target: true });
  } catch (err) {
    throw new AppFlagError('server_address', `${(err as Error).message} (where other services reach the app)`, null);
  }
  const { host, port } = parsed;
  if (isWildcard(host)) {
    throw new AppFlagError('server_address', `${host} is a wildcard, not an address others can call; give the app's reachable host`, text);
  }
  return { host, port };
}

/** Parses --healthcheck_url: an absolute http(s) URL. */
export function parseHealthUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new AppFlagError('healthcheck_url', 'not an absolute URL', text);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new AppFlagError('healthcheck_url', 'use http:// or https://', text);
  }
  return url;
}

export interface AppFlags {
  server_name?: string;
  server_address?: string;
  healthcheck_url?: string;
  healthcheck_interval: number;
  healthcheck_timeout: number;
  register_ttl: number;
  register_interval: number;
}

/**
 * The app options from the flags, or undefined when no app is configured. Throws AppFlagError
 * naming the flag for a name without an address (or the reverse), a URL without both, bad values.
 * `ttlGiven`: --register_ttl was given explicitly.
 */
export function appOptionsFromFlags(flags: AppFlags, ttlGiven: boolean): AppOptions | undefined {
  const name = flags.server_name?.trim() || undefined;
  const address = flags.server_address?.trim() || undefined;
  const url = flags.healthcheck_url?.trim() || undefined;
  if (!name && !address) {
    if (url) throw new AppFlagError('healthcheck_url', '{healthcheck_url} needs {server_name} and {server_address} (the app to register and check)');
    return undefined;
  }
  if (!name) throw new AppFlagError('server_name', '{server_address} needs {server_name} (the name to register the app under)');
  if (!address) throw new AppFlagError('server_address', '{server_name} needs {server_address} (host:port of the app)');
  const nameProblem = serviceNameProblem(name);
  if (nameProblem) throw new AppFlagError('server_name', nameProblem, null);
  const hostProblem = addressProblem(parseAppAddress(address).host);
  if (hostProblem) throw new AppFlagError('server_address', hostProblem, null);
  if (url) parseHealthUrl(url);
  const intervalMs = flags.healthcheck_interval;
  const timeoutMs = flags.healthcheck_timeout;
  if (url) {
    if (!(intervalMs > 0)) throw new AppFlagError('healthcheck_interval', '{healthcheck_interval} must be greater than 0');
    if (!(timeoutMs > 0)) throw new AppFlagError('healthcheck_timeout', '{healthcheck_timeout} must be greater than 0');
    const ttlMs = ttlGiven ? flags.register_ttl : 3 * intervalMs + timeoutMs;
    if (ttlMs <= intervalMs + timeoutMs) {
      throw new AppFlagError(
        'register_ttl',
        `{register_ttl} (${formatDuration(ttlMs)}) must be longer than {healthcheck_interval} plus {healthcheck_timeout} (${formatDuration(intervalMs + timeoutMs)}), or the registration lapses between checks`,
      );
    }
    return { name, address, healthcheckUrl: url, intervalMs, timeoutMs, ttlMs, refreshMs: intervalMs };
  }
  const ttlMs = flags.register_ttl;
  const refreshMs = flags.register_interval;
  if (ttlMs > 0 && !(refreshMs > 0 && refreshMs < ttlMs)) {
    throw new AppFlagError('register_interval', `{register_interval} (${formatDuration(refreshMs)}) must be greater than 0 and shorter than {register_ttl} (${formatDuration(ttlMs)})`);
  }
  return { name, address, intervalMs, timeoutMs, ttlMs, refreshMs };
}

export type AppHealth = 'unknown' | 'healthy' | 'unhealthy';

/** Where the app is registered when it is not at its own address (the sidecar's inbound listener). */
export interface RegisteredNode {
  address: string;
  port: number;
  metadata: Record<string, string>;
}

export class AppRegistration {
  readonly nodeId: string;
  private readonly record: Service;
  private health: AppHealth = 'unknown';
  /** Why the last check failed (undefined after a healthy one). */
  private reason?: string;
  private registered = false;
  private stopped = false;
  private timer?: NodeJS.Timeout;
  private inFlight?: AbortController;
  private readonly agent?: Agent;
  private readonly url?: URL;
  private readonly log;
  private readonly stats;
  /** Serialises registry writes so a slow register never lands after a later deregister. */
  private writes: Promise<void> = Promise.resolve();
  private unhookFail?: () => void;
  private unhookOk?: () => void;

  constructor(
    private readonly runtime: Runtime,
    private readonly options: AppOptions,
  ) {
    const { host, port } = parseAppAddress(options.address);
    this.nodeId = `${options.name}-${randomUUID()}`;
    this.record = { name: options.name, version: '', metadata: {}, endpoints: [], nodes: [{ id: this.nodeId, address: host, port, metadata: {} }] };
    this.log = runtime.logging.get('hc');
    const s = runtime.stats;
    this.stats = {
      attempt: s.counter('sidecar.health_check.attempt'),
      success: s.counter('sidecar.health_check.success'),
      failure: s.counter('sidecar.health_check.failure'),
      registered: s.gauge('sidecar.app.registered'),
    };
    if (options.healthcheckUrl) {
      this.url = parseHealthUrl(options.healthcheckUrl);
      this.agent = new Agent({ connect: { timeout: options.timeoutMs } });
    }
  }

  /** The current view, for logs and tests. */
  get state(): { health: AppHealth; registered: boolean; reason?: string } {
    return { health: this.health, registered: this.registered, reason: this.reason };
  }

  /**
   * Starts registering (and checking). Returns at once; the first check runs in the background.
   * `at`: the node to register instead of the app's own address (the sidecar's inbound listener,
   * with its metadata); the health checks still go to the app.
   */
  start(at?: RegisteredNode): void {
    if (at) this.record.nodes[0] = { id: this.nodeId, address: at.address, port: at.port, metadata: { ...at.metadata } };
    this.unhookFail = this.runtime.state.onFail(() => this.enqueue(() => this.doDeregister('draining')));
    this.unhookOk = this.runtime.state.onOk(() => {
      if (!this.url || this.health === 'healthy') return this.enqueue(() => this.doRegister('live again'));
    });
    if (this.url) {
      void this.checkLoop();
    } else {
      void this.enqueue(() => this.doRegister('start'));
      this.timer = setInterval(() => void this.enqueue(() => this.doRegister()), this.options.refreshMs);
    }
  }

  /** Stops checking and deregisters the app (bounded by the timeout). Idempotent. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) {
      clearTimeout(this.timer);
      clearInterval(this.timer);
    }
    this.inFlight?.abort();
    this.unhookFail?.();
    this.unhookOk?.();
    // Deregister even if a write is stuck: do not wait behind it for ever.
    const queued = this.writes.then(() => this.doDeregister('shutdown'));
    await Promise.race([queued, new Promise((r) => setTimeout(r, 5000).unref())]);
    await this.agent?.close().catch(() => undefined);
  }

  private enqueue(fn: () => Promise<void>): Promise<void> {
    this.writes = this.writes.then(fn, fn);
    return this.writes;
  }

  private async checkLoop(): Promise<void> {
    if (this.stopped) return;
    const started = Date.now();
    const healthy = await this.check();
    if (this.stopped) return;
    const before = this.health;
    this.health = healthy.ok ? 'healthy' : 'unhealthy';
    this.reason = healthy.ok ? undefined : healthy.reason;
    if (healthy.ok) {
      if (before !== 'healthy') this.log.info({ app: this.options.name, url: redactUrl(this.url!.href) }, 'app is healthy');
      if (this.runtime.state.state === 'live') await this.enqueue(() => this.doRegister(before !== 'healthy' ? 'healthy' : undefined));
    } else {
      if (before !== 'unhealthy') {
        const fields = { app: this.options.name, url: this.url!.href, reason: healthy.reason };
        if (before === 'unknown' && this.options.quietStart) this.log.debug(fields, 'app is not healthy yet');
        else this.log.warn(fields, 'app is unhealthy');
      }
      await this.enqueue(() => this.doDeregister(`unhealthy: ${healthy.reason}`));
    }
    if (this.stopped) return;
    const wait = Math.max(0, this.options.intervalMs - (Date.now() - started));
    this.timer = setTimeout(() => void this.checkLoop(), wait);
  }

  private async check(): Promise<{ ok: true } | { ok: false; reason: string }> {
    this.stats.attempt.inc();
    const controller = new AbortController();
    this.inFlight = controller;
    const timer = setTimeout(() => controller.abort(), this.options.timeoutMs);
    try {
      const res = await request(this.url!, {
        method: 'GET',
        dispatcher: this.agent,
        signal: controller.signal,
        // A fresh connection per check: a keep-alive connection the app closes just as a check
        // starts would fail that check and flap the registration.
        reset: true,
        headers: { 'user-agent': 'mesh-sidecar-health-check', accept: '*/*' },
      });
      await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
      if (controller.signal.aborted) throw new Error('timeout');
      if (res.statusCode === 200 || (this.options.any2xx && res.statusCode >= 200 && res.statusCode < 300)) {
        this.stats.success.inc();
        return { ok: true };
      }
      this.stats.failure.inc();
      return { ok: false, reason: `status ${res.statusCode}` };
    } catch (err) {
      this.stats.failure.inc();
      if (controller.signal.aborted) return { ok: false, reason: `no answer within ${formatDuration(this.options.timeoutMs)}` };
      const e = err as Error & { cause?: Error; code?: string };
      return { ok: false, reason: e.cause?.message ?? e.code ?? e.message };
    } finally {
      clearTimeout(timer);
      this.inFlight = undefined;
    }
  }

  private async doRegister(why?: string): Promise<void> {
    if (this.stopped || this.runtime.state.state !== 'live') return;
    try {
      await this.runtime.registry.register(this.record, { ttlMs: this.options.ttlMs });
      if (!this.registered || why) {
        const node = this.record.nodes[0]!;
        this.log.info({ app: this.options.name, node: this.nodeId, address: formatAddress(node.address, node.port), ttl: formatDuration(this.options.ttlMs), why }, 'app registered');
      }
      this.registered = true;
      this.stats.registered.set(1);
    } catch (err) {
      this.log.error({ app: this.options.name, err: (err as Error).message }, 'registering the app failed; will retry');
    }
  }

  private async doDeregister(why: string): Promise<void> {
    if (!this.registered) return;
    try {
      await this.runtime.registry.deregister(this.record);
      this.registered = false;
      this.stats.registered.set(0);
      this.log.info({ app: this.options.name, node: this.nodeId, why }, 'app deregistered');
    } catch (err) {
      this.log.error({ app: this.options.name, err: (err as Error).message, why }, 'deregistering the app failed');
    }
  }
}
