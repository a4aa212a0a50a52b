#!/usr/bin/env node
// @ts-check
/**
 * The container's probes, asked of the admin interface of the mesh process beside it (loopback only:
 * the admin is never exposed). Plain Node.js, no dependency, so it runs in the image as it is.
 *
 *   node probe.mjs ready   GET /ready: exit 0 when it answers 200 LIVE, else 1 (the Dockerfile's HEALTHCHECK)
 *   node probe.mjs drain   POST /healthcheck/fail, then GET /ready must answer 503 DRAINING: exit 0, else 1
 *                          (the Kubernetes preStop hook: the pod turns unready at once; SIGTERM, sent
 *                          next, finishes the drain: --drain_delay, then in-flight requests)
 *
 * The admin address is the one the mesh process itself reads from the environment, MESH_ADMIN_ADDRESS
 * (default 127.0.0.1:9901, the gateway's; a sidecar's default is 127.0.0.1:9902); with
 * MESH_ADMIN_TOKEN set, the requests carry `Authorization: Bearer <token>`. Each request gives up
 * after 3 seconds.
 */
import { request } from 'node:http';

const TIMEOUT_MS = 3000;

/** `host:port`, `:port` (loopback) or `[v6]:port` from MESH_ADMIN_ADDRESS, as an http:// base URL. */
function adminBase(env) {
  const address = env.MESH_ADMIN_ADDRESS || '127.0.0.1:9901';
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]*):(\d{1,5})$/.exec(address);
  if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535) throw new Error(`MESH_ADMIN_ADDRESS=${address}: expected host:port of the admin interface`);
  const host = m[1] === '' || m[1] === '0.0.0.0' ? '127.0.0.1' : m[1] === '[::]' ? '[::1]' : m[1];
  return `http://${host}:${m[2]}`;
}

/** One request to the admin; resolves with its status and body. */
function ask(method, url, token) {
  return new Promise((resolve, reject) => {
    const headers = token ? { authorization: `Bearer ${token}` } : {};
    const req = request(url, { method, headers, timeout: TIMEOUT_MS }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end();
  });
}

async function main(argv, env) {
  const verb = argv[0];
  if (verb !== 'ready' && verb !== 'drain') {
    process.stderr.write('usage: probe.mjs ready|drain (admin at MESH_ADMIN_ADDRESS, default 127.0.0.1:9901)\n');
    return 2;
  }
  const base = adminBase(env);
  const token = env.MESH_ADMIN_TOKEN || undefined;
  if (verb === 'drain') {
    const fail = await ask('POST', `${base}/healthcheck/fail`, token);
    if (fail.status !== 200) {
      process.stderr.write(`drain: ${base}/healthcheck/fail answered ${fail.status} ${fail.body.trim()}\n`);
      return 1;
    }
  }
  const ready = await ask('GET', `${base}/ready`, token);
  const want = verb === 'ready' ? 200 : 503;
  process.stdout.write(`${verb}: ${base}/ready answered ${ready.status} ${ready.body.trim()}\n`);
  return ready.status === want ? 0 : 1;
}

main(process.argv.slice(2), process.env).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`probe: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
