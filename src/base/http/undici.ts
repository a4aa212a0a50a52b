/**
 * The parts of undici mesh uses: its agent, pool and connector, and `request`. They are loaded
 * from undici's own modules, not from its index, which also loads fetch, WebSocket, the caches,
 * cookies and the mock agents (about 9 MiB of a process's memory that mesh never uses;
 * docs/sidecar.md, "Memory"). What the index adds to these parts is done here the same way: the
 * request API on every dispatcher, and `request(url, options)`. test/project/undici-parts.test.ts
 * checks that these are undici's own objects. The types are undici's, at compile time only.
 */
import { createRequire } from 'node:module';
import type * as Undici from 'undici';

const load = createRequire(import.meta.url);

const api = load('undici/lib/api/index.js') as Record<string, unknown>;
const dispatcher = load('undici/lib/dispatcher/dispatcher.js') as { prototype: object };
// undici's index does this too (the same functions): request(), stream(), pipeline(), connect()
// and upgrade() on every agent, pool and client.
Object.assign(dispatcher.prototype, api);

export const Agent = load('undici/lib/dispatcher/agent.js') as typeof Undici.Agent;
export type Agent = Undici.Agent;
export const Pool = load('undici/lib/dispatcher/pool.js') as typeof Undici.Pool;
export type Pool = Undici.Pool;
export const buildConnector = load('undici/lib/core/connect.js') as typeof Undici.buildConnector;
// undici's own type of a connector, under the value's name.
export declare namespace buildConnector {
  type connector = Undici.buildConnector.connector;
}
const { getGlobalDispatcher } = load('undici/lib/global.js') as { getGlobalDispatcher: typeof Undici.getGlobalDispatcher };
const { parseURL } = load('undici/lib/core/util.js') as { parseURL: (url: string | URL) => URL };

type RequestOptions = Parameters<typeof Undici.request>[1];

/** undici's `request(url, options)`: on `options.dispatcher`, else the global one (as the index's). */
export function request(url: string | URL, options: RequestOptions = {}): ReturnType<typeof Undici.request> {
  const parsed = parseURL(url);
  const opts = options as NonNullable<RequestOptions> & { dispatcher?: Undici.Dispatcher; method?: string; body?: unknown };
  const target = opts.dispatcher ?? getGlobalDispatcher();
  return target.request({
    ...opts,
    origin: parsed.origin,
    path: parsed.search ? `${parsed.pathname}${parsed.search}` : parsed.pathname,
    method: (opts.method || (opts.body ? 'PUT' : 'GET')) as Undici.Dispatcher.HttpMethod,
  }) as ReturnType<typeof Undici.request>;
}
