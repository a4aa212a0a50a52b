/**
 * Per-endpoint stats (--stats_endpoints): for each declared endpoint of a framework service (or
 * each route of a gateway), requests, answers by status class and code, and a latency histogram:
 *
 *   service.<service>.endpoint.<Endpoint.Method>.rq_total
 *   service.<service>.endpoint.<Endpoint.Method>.rq_2xx, rq_4xx, ... (by class), rq_code_404 ... (by code)
 *   service.<service>.endpoint.<Endpoint.Method>.rq_time   (histogram, ms)
 *
 * Cardinality is bounded: only declared names get stats of their own; any other name (a caller
 * may send any Mesh-Endpoint, a path may match no route) is counted in the one `_other` family.
 * Status codes are counted per code only from 100 to 599 (anything else as its class only).
 * Tag extraction (DEFAULT_TAG_RULES in store.ts) gives Prometheus `service` and `endpoint` labels.
 */
import { declareStats, type Counter, type FamilyStats, type StatsScope } from './store.js';

/** The family every undeclared endpoint name or unrouted path is counted in. */
export const OTHER_ENDPOINT = '_other';

/** The stat prefix of a service's (or a gateway's) per-endpoint stats. */
export function endpointStatPrefix(service: string): string {
  return `service.${service}.endpoint.`;
}

export const ENDPOINT_STATS = {
  counters: { total: 'rq_total', c1xx: 'rq_1xx', c2xx: 'rq_2xx', c3xx: 'rq_3xx', c4xx: 'rq_4xx', c5xx: 'rq_5xx' },
  histograms: { time: 'rq_time' },
} as const;

/** One endpoint's stats. */
export class EndpointFamily {
  private readonly stats: FamilyStats<typeof ENDPOINT_STATS>;
  private readonly classes: readonly Counter[];
  /** rq_code_<code> counters, created at a code's first answer (at most 500 per family). */
  private readonly codes = new Map<number, Counter>();

  constructor(private readonly scope: StatsScope) {
    this.stats = declareStats(scope, ENDPOINT_STATS);
    this.classes = [this.stats.c1xx, this.stats.c2xx, this.stats.c3xx, this.stats.c4xx, this.stats.c5xx];
  }

  /** One answered request: its status and how long it took (ms). */
  record(status: number, ms: number): void {
    this.stats.total.inc();
    this.stats.time.record(ms);
    const cls = Math.floor(status / 100);
    if (cls < 1 || cls > 5) return;
    this.classes[cls - 1]!.inc();
    let code = this.codes.get(status);
    if (!code) {
      code = this.scope.counter(`rq_code_${status}`);
      this.codes.set(status, code);
    }
    code.inc();
  }
}

/**
 * The per-endpoint stats of one service or gateway. `of(name)` answers the declared endpoint's
 * family, or the `_other` family for any name not declared with `declare`.
 */
export class EndpointStats {
  private readonly families = new Map<string, EndpointFamily>();
  private other?: EndpointFamily;
  private readonly scope: StatsScope;

  constructor(root: StatsScope, service: string) {
    this.scope = root.scope(endpointStatPrefix(service));
  }

  /** Gives `name` stats of its own (its stats exist, at zero, from now on) and answers them. */
  declare(name: string): EndpointFamily {
    if (name === OTHER_ENDPOINT) return this.of(undefined);
    let family = this.families.get(name);
    if (!family) this.families.set(name, (family = new EndpointFamily(this.scope.scope(`${name}.`))));
    return family;
  }

  of(name: string | undefined): EndpointFamily {
    const found = name === undefined ? undefined : this.families.get(name);
    if (found) return found;
    this.other ??= new EndpointFamily(this.scope.scope(`${OTHER_ENDPOINT}.`));
    return this.other;
  }
}
