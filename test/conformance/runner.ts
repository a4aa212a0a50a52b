/**
 * Runs the conformance cases (cases.ts) against one mesh front end (`mesh api`, `mesh sidecar`,
 * `mesh proxy`) that serves a route file: per case it writes the case's documents as the file,
 * waits until the front reports the file taken (`routes.update_success`) or refused
 * (`routes.update_failure`, with the reason from admin `/routes`), then sends the case's requests
 * and compares what came back, and what the echo backend saw, as the upstream suite does
 * (conformance/utils/http CompareRoundTrip). A case passes when every exchange does.
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { renameSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import { http, waitFor, waitForStill } from '../helpers.js';
import type { ConformanceCase, Exchange } from './cases.js';
import type { EchoBackend, EchoedRequest } from './echo.js';

export interface Front {
  name: string;
  /** http://127.0.0.1:PORT where the routes are served. */
  url: string;
  admin: string;
  /** A Gateway case's front: the URL of each listener port (as the Gateway writes it). */
  ports?: Map<number, string>;
  stop(): Promise<unknown>;
}

/** Starts a front for a Gateway case (its file written): mesh api only; undefined elsewhere. */
export type GatewayFront = (routesText: string) => Promise<Front>;

export type Outcome = 'pass' | 'fail' | 'skip';
export interface CaseResult {
  name: string;
  outcome: Outcome;
  reason?: string;
  features: string[];
}

interface Answer {
  status: number;
  headers: Record<string, string[]>;
  body: string;
}

function send(base: string, method: string, path: string, host: string | undefined, headers: Record<string, string>, serverName?: string): Promise<Answer> {
  const url = new URL(base);
  const tls = url.protocol === 'https:';
  const request = tls ? httpsRequest : httpRequest;
  // As upstream's TLS requests: the SNI name is the case's (else the Host), the certificate not verified here (admin /certs shows it).
  const sni = serverName ?? host?.replace(/:[0-9]+$/, '');
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, method, path, headers: { ...headers, ...(host ? { host } : {}) }, agent: false, ...(tls ? { servername: sni, rejectUnauthorized: false } : {}) },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const h: Record<string, string[]> = {};
          for (const [k, v] of Object.entries(res.headersDistinct)) if (v) h[k.toLowerCase()] = [...v];
          resolve({ status: res.statusCode ?? 0, headers: h, body: Buffer.concat(chunks).toString('utf8') });
        });
        res.on('error', reject);
      },
    );
    req.setTimeout(15000, () => req.destroy(new Error('no answer within 15 s')));
    req.on('error', reject);
    req.end();
  });
}

async function stat(admin: string, name: string): Promise<number> {
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  return (res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []).find((s) => s.name === name)?.value ?? 0;
}

/** The last reload error of the file's route table in admin /routes. */
async function reloadError(admin: string): Promise<string> {
  const res = await http('GET', `${admin}/routes`);
  const tables = res.json<Array<Record<string, unknown>>>();
  const text = JSON.stringify(tables);
  const m = /"last_reload_error":"((?:[^"\\]|\\.)*)"/.exec(text);
  return m ? JSON.parse(`"${m[1]}"`) : 'refused (no reason shown)';
}

/** Writes the case's file and waits for the front to take or refuse it; returns the refusal, if any. */
export async function load(front: Front, routesFile: string, text: string): Promise<string | undefined> {
  const ok = await stat(front.admin, 'routes.update_success');
  const bad = await stat(front.admin, 'routes.update_failure');
  writeFileSync(`${routesFile}.tmp`, text);
  renameSync(`${routesFile}.tmp`, routesFile);
  const done = await waitFor(async () => {
    if ((await stat(front.admin, 'routes.update_success')) > ok) return 'ok';
    if ((await stat(front.admin, 'routes.update_failure')) > bad) return 'bad';
    return undefined;
  }, 15000);
  return done === 'bad' ? `the route file is refused: ${(await reloadError(front.admin)).replaceAll(`${routesFile} `, '')}` : undefined;
}

const isRedirect = (s: number) => [300, 301, 302, 303, 304, 305, 307, 308].includes(s);
const isTimeout = (s: number) => s === 408 || s === 504;
const joined = (h: Record<string, string[]>, name: string) => h[name.toLowerCase()]?.join(',');
const lower = (h: Record<string, string[]>) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));

function describe(x: Exchange): string {
  const r = x.request;
  const hs = r.headers ? ` with ${Object.entries(r.headers).map(([k, v]) => `${k}: ${v}`).join(', ')}` : '';
  return `${r.method ?? 'GET'} ${r.host ?? ''}${r.path}${hs}`;
}

/** Compares one exchange; returns why it failed, or undefined. */
async function exchange(front: Front, x: Exchange, backends: EchoBackend[]): Promise<string | undefined> {
  const method = x.request.method ?? 'GET';
  let path = x.request.path;
  let expectedPath = x.expectedRequest?.path ?? path;
  let id: string | undefined;
  if (x.mirroredTo) {
    // As upstream: a request id in the query, so the copies are found in the backends' logs.
    id = randomUUID();
    const add = (p: string) => `${p}${p.includes('?') ? '&' : '?'}gateway-api-conformance-request-id=${id}`;
    path = add(path);
    expectedPath = add(expectedPath);
  }
  if (x.retrySimulation) {
    // As upstream: a fresh uuid, so the echo counts this request's tries alone.
    path = `${path}${path.includes('?') ? '&' : '?'}${new URLSearchParams({ ...x.retrySimulation, uuid: randomUUID() }).toString()}`;
    if (!x.expectedRequest?.path) expectedPath = path;
  }
  const headers: Record<string, string> = { ...(x.request.headers ?? {}) };
  headers['X-Echo-Set-Header'] = Object.entries(x.backendSetResponseHeaders ?? {})
    .map(([k, v]) => `${k}:${v}`)
    .join(',');
  const base = front.ports ? front.ports.get(x.request.port ?? 80) : front.url;
  if (base === undefined) return `no listener on port ${x.request.port ?? 80}`;
  const res = await send(base, method, path, x.request.host, headers, x.request.serverName);
  const want = [x.response?.status ?? 200].flat();
  if (!(want.includes(res.status) || (want.some(isTimeout) && isTimeout(res.status)))) return `expected status ${want.join(' or ')}, got ${res.status} ${res.body.slice(0, 160)}`;
  if (x.answeredByFront) return answerHeaders(x, res);
  if (res.status === 200 || res.status === 204) {
    let echo: EchoedRequest;
    try {
      echo = JSON.parse(res.body) as EchoedRequest;
      if (typeof echo.pod !== 'string') throw new Error('no pod');
    } catch {
      return `expected the echo backend's answer, got ${res.body.slice(0, 160)}`;
    }
    const exp = x.expectedRequest;
    if (exp?.host !== undefined && exp.host !== echo.host) return `expected host ${exp.host}, got ${echo.host}`;
    if (expectedPath !== echo.path) return `expected path ${expectedPath}, got ${echo.path}`;
    const wantMethod = exp?.method ?? method;
    if (wantMethod !== echo.method) return `expected method ${wantMethod}, got ${echo.method}`;
    const seen = lower(echo.headers);
    for (const [name, value] of Object.entries(exp?.headers ?? {})) {
      const got = joined(seen, name);
      if (got === undefined) return `expected request header ${name} to be set`;
      if (got !== value) return `expected request header ${name}: ${value}, got ${got}`;
    }
    for (const name of exp?.absentHeaders ?? []) if (joined(seen, name) !== undefined) return `expected request header ${name} to be absent, got ${joined(seen, name)}`;
    const bad = answerHeaders(x, res);
    if (bad) return bad;
    if (x.backend && !echo.pod.startsWith(x.backend)) return `expected pod of ${x.backend}, got ${echo.pod}`;
  } else if (isRedirect(res.status) && x.redirect) {
    const location = joined(res.headers, 'location');
    if (!location) return 'a redirect without Location';
    const sent = new URL(base);
    const to = new URL(location, `${sent.protocol}//${x.request.host ?? sent.host}${x.request.path}`);
    const scheme = to.protocol.replace(':', '');
    const want = x.redirect;
    if (want.host !== undefined && want.host !== to.hostname) return `expected redirect host ${want.host}, got ${to.hostname}`;
    if (want.port !== undefined) {
      if (want.port !== to.port) return `expected redirect port ${want.port}, got ${to.port || '(none)'}`;
    } else {
      // Upstream the Gateway listens on 80, the scheme's own port, so a redirect that keeps the
      // scheme may carry the port or not. Off-cluster the front listens on a port of its own: a
      // redirect that keeps the scheme and the client's Host may carry that port instead of 80.
      const own = scheme === 'http' ? ['', '80'] : scheme === 'https' ? ['', '443'] : [to.port];
      if (scheme === sent.protocol.replace(':', '') && x.request.host === undefined) own.push(sent.port);
      if (!own.includes(to.port)) return `expected no redirect port for ${scheme}, got ${to.port}`;
    }
    const wantScheme = want.scheme ?? 'http';
    if (wantScheme !== scheme) return `expected redirect scheme ${wantScheme}, got ${scheme}`;
    const wantPath = want.path ?? x.request.path.split('?')[0];
    if (wantPath !== to.pathname) return `expected redirect path ${wantPath}, got ${to.pathname}`;
  }
  for (const name of x.mirroredTo ?? []) {
    const b = backends.find((e) => e.name === name);
    const found = await waitFor(() => b?.received.some((r) => r.path.includes(id!)) ?? false, 5000).catch(() => false);
    if (!found) return `expected a copy at ${name}, none arrived`;
  }
  return undefined;
}

/** The answer's headers against `response.headers`, `validHeaderValues` (white space ignored, as upstream's IgnoreWhitespace) and `absentHeaders`. */
function answerHeaders(x: Exchange, res: Answer): string | undefined {
  for (const [name, value] of Object.entries(x.response?.headers ?? {})) {
    const got = joined(res.headers, name);
    if (got === undefined) return `expected response header ${name} to be set`;
    if (got !== value) return `expected response header ${name}: ${value}, got ${got}`;
  }
  const bare = (v: string) => v.replace(/\s+/g, '');
  for (const [name, values] of Object.entries(x.response?.validHeaderValues ?? {})) {
    const got = joined(res.headers, name);
    if (got === undefined) return `expected response header ${name} to be set`;
    if (!values.some((v) => bare(v) === bare(got))) return `expected response header ${name}: ${values.join(' or ')}, got ${got}`;
  }
  for (const name of x.response?.absentHeaders ?? []) if (joined(res.headers, name) !== undefined) return `expected response header ${name} to be absent, got ${joined(res.headers, name)}`;
  return undefined;
}

/**
 * The weighted cases' check, as upstream's (conformance/utils/weight): `total` calls, `concurrency`
 * at a time, each backend's share within 5 points of its weight (none for a weight of 0), up to
 * `rounds` rounds. `call` makes one call and answers the pod that served it, or why it failed.
 */
export async function weightedShares(weights: Record<string, number>, call: (n: number) => Promise<{ pod: string } | { error: string }>, options: { rounds: number; concurrency: number; total?: number }): Promise<string | undefined> {
  const total = options.total ?? 500;
  let why = '';
  for (let round = 0; round < options.rounds; round++) {
    const counts: Record<string, number> = {};
    let next = 0;
    let error: string | undefined;
    const worker = async () => {
      while (next < total && !error) {
        next++;
        const answer = await call(next);
        if ('error' in answer) return void (error = answer.error);
        const backend = Object.keys(weights).find((b) => answer.pod.startsWith(b)) ?? answer.pod;
        counts[backend] = (counts[backend] ?? 0) + 1;
      }
    };
    await Promise.all(Array.from({ length: options.concurrency }, worker));
    if (error) return error;
    const off = Object.entries(weights)
      .map(([b, w]) => ({ b, w, got: (counts[b] ?? 0) / total }))
      .filter(({ w, got }) => (w === 0 ? got > 0 : Math.abs(got - w) > 0.05));
    if (off.length === 0) return undefined;
    why = off.map(({ b, w, got }) => `${b} got ${(got * 100).toFixed(1)} %, expected ${w * 100} %`).join('; ');
  }
  return why;
}

/** The weighted HTTPRoute case: 500 requests, 8 at a time, up to 5 rounds. */
function weighted(front: Front, weights: Record<string, number>): Promise<string | undefined> {
  return weightedShares(
    weights,
    async (n) => {
      const res = await send(front.url, 'GET', '/', undefined, { 'X-Jitter': String(n) });
      if (res.status !== 200) return { error: `expected status 200, got ${res.status} ${res.body.slice(0, 160)}` };
      let pod: unknown;
      try {
        pod = (JSON.parse(res.body) as EchoedRequest).pod;
      } catch {
        // not the echo's answer: below
      }
      return typeof pod === 'string' ? { pod } : { error: `expected the echo backend's answer, got ${res.body.slice(0, 160)}` };
    },
    { rounds: 5, concurrency: 8 },
  );
}

/**
 * The mirror-share case: many requests to each path, every one answered by the backend, and the
 * share copied to the mirror (found by a token in the query) within the tolerance of its percent.
 */
async function mirrorShares(front: Front, spec: NonNullable<ConformanceCase['mirrorShares']>, backends: EchoBackend[]): Promise<string | undefined> {
  for (const { path, mirror, percent } of spec.paths) {
    const token = randomUUID();
    let next = 0;
    let error: string | undefined;
    const worker = async () => {
      while (next < spec.requests && !error) {
        const n = next++;
        const res = await send(front.url, 'GET', `${path}?mirror-share=${token}&n=${n}`, undefined, {});
        let pod: unknown;
        try {
          pod = (JSON.parse(res.body) as EchoedRequest).pod;
        } catch {
          // not the echo's answer: below
        }
        if (res.status !== 200 || typeof pod !== 'string' || !pod.startsWith(spec.backend)) error = `GET ${path}: expected 200 from ${spec.backend}, got ${res.status} ${res.body.slice(0, 160)}`;
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    if (error) return error;
    const to = backends.find((b) => b.name === mirror)!;
    const copies = () => to.received.filter((r) => r.path.includes(token)).length;
    // The copies are sent as the requests are answered: counted once no more arrive for 300 ms.
    const share = ((await waitForStill(copies, { polls: 3, timeoutMs: 10000 })) / spec.requests) * 100;
    if (Math.abs(share - percent) > spec.tolerance) return `GET ${path}: ${share.toFixed(1)} % of the requests were copied to ${mirror}, expected ${percent} % (± ${spec.tolerance})`;
  }
  return undefined;
}

/** The WebSocket case: a text and a binary message go through the front and come back. */
async function websocket(front: Front, path: string): Promise<string | undefined> {
  const ws = new WebSocket(`${front.url.replace(/^http/, 'ws')}${path}`);
  const next = () =>
    new Promise<{ data: Buffer; binary: boolean }>((resolve, reject) => {
      ws.once('message', (data: Buffer, binary: boolean) => resolve({ data, binary }));
      ws.once('error', reject);
      ws.once('close', () => reject(new Error('closed')));
    });
  try {
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
    });
    const text = 'Websocket Support!';
    const gotText = next();
    ws.send(text);
    const t = await gotText;
    if (t.binary || t.data.toString() !== text) return `expected the text frame back, got ${t.data.toString()}`;
    const bytes = Buffer.from([1, 2, 3, 4, 5, 6, 7]);
    const gotBytes = next();
    ws.send(bytes, { binary: true });
    const b = await gotBytes;
    if (!b.binary || !b.data.equals(bytes)) return `expected the binary frame back, got ${b.data.toString('hex')}`;
    return undefined;
  } catch (err) {
    return `WebSocket ${path}: ${(err as Error).message}`;
  } finally {
    ws.terminate();
  }
}

/** The Accepted condition of each route in admin /routes against the case's `accepted`. */
async function acceptedConditions(front: Front, want: NonNullable<ConformanceCase['accepted']>): Promise<string | undefined> {
  type Status = { route: string; conditions: Array<{ type: string; status: string; reason: string; message: string }> };
  const statuses: Status[] = [];
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) return v.forEach(walk);
    if (v === null || typeof v !== 'object') return;
    const o = v as Record<string, unknown>;
    if (typeof o.route === 'string' && Array.isArray(o.conditions)) statuses.push(o as unknown as Status);
    else Object.values(o).forEach(walk);
  };
  walk((await http('GET', `${front.admin}/routes`)).json());
  for (const [route, w] of Object.entries(want)) {
    const cond = statuses.find((s) => s.route === route)?.conditions.find((c) => c.type === 'Accepted');
    if (!cond) return `route ${route}: no Accepted condition in admin /routes`;
    if (cond.status !== w.status || cond.reason !== w.reason) return `route ${route}: expected Accepted ${w.status} ${w.reason}, got ${cond.status} ${cond.reason} (${cond.message})`;
  }
  return undefined;
}

export async function runCase(front: Front, routesFile: string, c: ConformanceCase, backends: EchoBackend[], gatewayFront?: GatewayFront): Promise<CaseResult> {
  const base = { name: c.name, features: c.features };
  if (c.skip) return { ...base, outcome: 'skip', reason: c.skip };
  if (c.gateways !== undefined) {
    if (!gatewayFront) return { ...base, outcome: 'skip', reason: 'Gateway documents are served by mesh api only' };
    let own: Front;
    try {
      own = await gatewayFront(`${c.gateways}---\n${c.routes ?? ''}`);
    } catch (err) {
      return { ...base, outcome: 'fail', reason: `mesh api did not start: ${(err as Error).message}` };
    }
    try {
      return await runExchanges(own, c, backends, base);
    } finally {
      await own.stop();
    }
  }
  const refused = await load(front, routesFile, c.routes ?? '# no routes\n');
  if (refused) return { ...base, outcome: 'fail', reason: refused };
  return runExchanges(front, c, backends, base);
}

async function runExchanges(front: Front, c: ConformanceCase, backends: EchoBackend[], base: { name: string; features: string[] }): Promise<CaseResult> {
  if (c.accepted) {
    const why = await acceptedConditions(front, c.accepted);
    if (why) return { ...base, outcome: 'fail', reason: why };
  }
  if (c.weights) {
    const why = await weighted(front, c.weights);
    return why ? { ...base, outcome: 'fail', reason: why } : { ...base, outcome: 'pass' };
  }
  if (c.websocket) {
    const why = await websocket(front, c.websocket.path);
    return why ? { ...base, outcome: 'fail', reason: why } : { ...base, outcome: 'pass' };
  }
  for (const x of c.exchanges ?? []) {
    let why: string | undefined;
    try {
      why = await exchange(front, x, backends);
    } catch (err) {
      why = `request failed: ${(err as Error).message}`;
    }
    if (why) return { ...base, outcome: 'fail', reason: `${describe(x)}: ${why}` };
  }
  if (c.mirrorShares) {
    let why: string | undefined;
    try {
      why = await mirrorShares(front, c.mirrorShares, backends);
    } catch (err) {
      why = `request failed: ${(err as Error).message}`;
    }
    if (why) return { ...base, outcome: 'fail', reason: why };
  }
  return { ...base, outcome: 'pass' };
}

export async function runAll(front: Front, routesFile: string, cases: ConformanceCase[], backends: EchoBackend[], gatewayFront?: GatewayFront): Promise<CaseResult[]> {
  const out: CaseResult[] = [];
  for (const c of cases) out.push(await runCase(front, routesFile, c, backends, gatewayFront));
  return out;
}

/** The report in the shape of the upstream conformance reports: per profile, Core and Extended. */
export function report(front: string, results: CaseResult[], profile = 'GATEWAY-HTTP'): string[] {
  const core = results.filter((r) => r.features.length === 0);
  const ext = results.filter((r) => r.features.length > 0);
  const count = (rs: CaseResult[], o: Outcome) => rs.filter((r) => r.outcome === o).length;
  const result = (rs: CaseResult[]) => (count(rs, 'fail') === 0 ? 'success' : count(rs, 'pass') === 0 ? 'failure' : 'partial');
  // A case counts for the feature it tests (its first); the others it needs are its prerequisites.
  const features = [...new Set(ext.map((r) => r.features[0]!))].sort();
  const ran = (f: string) => ext.filter((r) => r.features[0] === f && r.outcome !== 'skip');
  const supported = features.filter((f) => ran(f).length > 0 && ran(f).every((r) => r.outcome === 'pass'));
  const unsupported = features.filter((f) => ran(f).some((r) => r.outcome === 'fail'));
  const notRun = features.filter((f) => ran(f).length === 0);
  const lines = [
    `profile ${profile} (${front})`,
    `  core: result ${result(core)}; passed ${count(core, 'pass')}, failed ${count(core, 'fail')}, skipped ${count(core, 'skip')} (of ${core.length})`,
    `  extended: result ${result(ext)}; passed ${count(ext, 'pass')}, failed ${count(ext, 'fail')}, skipped ${count(ext, 'skip')} (of ${ext.length})`,
    `  extended supported features: ${supported.join(', ') || '(none)'}`,
    `  extended unsupported features: ${unsupported.join(', ') || '(none)'}`,
    `  extended features not tested off-cluster: ${notRun.join(', ') || '(none)'}`,
  ];
  for (const r of results) lines.push(`  ${r.outcome.toUpperCase()} ${r.name}${r.reason ? `: ${r.reason}` : ''}`);
  return lines;
}
