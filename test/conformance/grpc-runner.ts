/**
 * Runs the GRPCRoute conformance cases (grpc-cases.ts) against one mesh front end that serves
 * native gRPC: per case it writes the case's documents as the route file and waits until the front
 * reports it taken (runner.ts `load`), or, for a case with Gateway documents, starts a `mesh api`
 * of its own with them; then a @grpc/grpc-js client calls the echo service through the front and
 * the answer is compared as upstream compares it (conformance/utils/grpc compareResponse: the
 * status; for OK the fully qualified method, the namespace and the pod's backend), with the
 * metadata the backend saw where the case says.
 */
import * as grpc from '@grpc/grpc-js';
import { randomUUID } from 'node:crypto';
import { load, weightedShares, type CaseResult, type Front, type GatewayFront } from './runner.js';
import { ECHO_NAMESPACE } from './echo.js';
import { ECHO_SERVICE, GrpcEcho, type GrpcEchoResponse } from './grpc-echo.js';
import type { GrpcConformanceCase, GrpcExchange } from './grpc-cases.js';

interface Answer {
  code: grpc.status;
  details: string;
  response: GrpcEchoResponse | undefined;
}

/** host:port of a front's URL. */
const target = (url: string) => new URL(url).host;

/** One client per authority, closed with the case. */
class Clients {
  private readonly byAuthority = new Map<string, grpc.Client>();
  constructor(private readonly address: string) {}

  of(authority: string | undefined): any {
    const key = authority ?? '';
    let c = this.byAuthority.get(key);
    if (!c) {
      c = new GrpcEcho(this.address, grpc.credentials.createInsecure(), authority ? { 'grpc.default_authority': authority } : {});
      this.byAuthority.set(key, c);
    }
    return c;
  }

  close(): void {
    for (const c of this.byAuthority.values()) c.close();
  }
}

function unary(client: any, x: { method: string; metadata?: Record<string, string> }): Promise<Answer> {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(x.metadata ?? {})) md.set(k, v);
  return new Promise((resolve) => {
    client[x.method]({}, md, { deadline: Date.now() + 15000 }, (err: grpc.ServiceError | null, response: GrpcEchoResponse) =>
      resolve(err ? { code: err.code, details: err.details, response: undefined } : { code: grpc.status.OK, details: '', response }),
    );
  });
}

function describe(x: GrpcExchange): string {
  const md = x.metadata ? ` with ${Object.entries(x.metadata).map(([k, v]) => `${k}: ${v}`).join(', ')}` : '';
  return `${x.authority ?? ''}/${ECHO_SERVICE}/${x.method}${md}`;
}

/** Values of one metadata name as a list: several entries, or one joined by commas, compare the same. */
const valuesOf = (headers: Array<{ key: string; value: string }>, name: string) =>
  headers
    .filter((h) => h.key.toLowerCase() === name)
    .flatMap((h) => h.value.split(','))
    .map((v) => v.trim());

/** Compares one call; returns why it failed, or undefined. */
async function exchange(clients: Clients, x: GrpcExchange): Promise<string | undefined> {
  const res = await unary(clients.of(x.authority), x);
  const want = grpc.status[x.code ?? 'OK'];
  if (res.code !== want) return `expected ${x.code ?? 'OK'}, got ${grpc.status[res.code]} (${res.details})`;
  if (res.code !== grpc.status.OK) return undefined;
  const a = res.response?.assertions;
  if (!a) return 'an OK without the echo assertions';
  const method = `/${ECHO_SERVICE}/${x.method}`;
  if (a.fully_qualified_method !== method) return `expected method ${method}, got ${a.fully_qualified_method}`;
  if (a.context.namespace !== ECHO_NAMESPACE) return `expected namespace ${ECHO_NAMESPACE}, got ${a.context.namespace}`;
  if (x.backend && !a.context.pod.startsWith(x.backend)) return `expected pod of ${x.backend}, got ${a.context.pod}`;
  for (const [name, values] of Object.entries(x.seen ?? {})) {
    const got = valuesOf(a.headers, name);
    if (got.join(',') !== values.join(',')) return `expected the backend to get ${name}: ${values.join(', ')}, got ${got.length ? got.join(', ') : '(none)'}`;
  }
  for (const name of x.absent ?? []) if (valuesOf(a.headers, name).length) return `expected the backend not to get ${name}, got ${valuesOf(a.headers, name).join(', ')}`;
  return undefined;
}

/** The weighted GRPCRoute case: 500 calls, 10 at a time, up to 10 rounds, each with upstream's entropy (a fresh x-jitter). */
function weighted(clients: Clients, weights: Record<string, number>): Promise<string | undefined> {
  return weightedShares(
    weights,
    async () => {
      const res = await unary(clients.of(undefined), { method: 'Echo', metadata: { 'x-jitter': randomUUID() } });
      const pod = res.response?.assertions.context.pod;
      return res.code === grpc.status.OK && pod ? { pod } : { error: `expected OK from an echo backend, got ${grpc.status[res.code]} (${res.details})` };
    },
    { rounds: 10, concurrency: 10 },
  );
}

async function runCalls(address: string, c: GrpcConformanceCase, base: { name: string; features: string[] }): Promise<CaseResult> {
  const clients = new Clients(address);
  try {
    if (c.weights) {
      const why = await weighted(clients, c.weights);
      return why ? { ...base, outcome: 'fail', reason: why } : { ...base, outcome: 'pass' };
    }
    for (const x of c.exchanges ?? []) {
      const why = await exchange(clients, x);
      if (why) return { ...base, outcome: 'fail', reason: `${describe(x)}: ${why}` };
    }
    return { ...base, outcome: 'pass' };
  } finally {
    clients.close();
  }
}

export async function runGrpcCase(front: Front, routesFile: string, c: GrpcConformanceCase, gatewayFront?: GatewayFront): Promise<CaseResult> {
  const base = { name: c.name, features: c.features };
  if (c.skip) return { ...base, outcome: 'skip', reason: c.skip };
  if (c.gateways !== undefined) {
    if (!gatewayFront) return { ...base, outcome: 'skip', reason: 'Gateway documents are served by mesh api only' };
    let own: Front;
    try {
      own = await gatewayFront(`${c.gateways}---\n${c.routes}`);
    } catch (err) {
      return { ...base, outcome: 'fail', reason: `mesh api did not start: ${(err as Error).message}` };
    }
    try {
      const port80 = own.ports?.get(80);
      if (!port80) return { ...base, outcome: 'fail', reason: 'no listener on port 80' };
      return await runCalls(target(port80), c, base);
    } finally {
      await own.stop();
    }
  }
  const refused = await load(front, routesFile, c.routes);
  if (refused) return { ...base, outcome: 'fail', reason: refused };
  return runCalls(target(front.url), c, base);
}

export async function runGrpcAll(front: Front, routesFile: string, cases: GrpcConformanceCase[], gatewayFront?: GatewayFront): Promise<CaseResult[]> {
  const out: CaseResult[] = [];
  for (const c of cases) out.push(await runGrpcCase(front, routesFile, c, gatewayFront));
  return out;
}
