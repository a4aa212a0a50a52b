/**
 * Node's http module, required rather than imported. An ES import of a builtin copies every export
 * of it, getters included, and on Node 22 and later three of node:http's exports (WebSocket,
 * CloseEvent, MessageEvent) are getters that load Node's own copy of undici (its fetch and
 * WebSocket): about 12 MiB of an idle process that mesh never uses (docs/sidecar.md, "Memory";
 * test/fronts/lazy-modules.test.ts checks it stays unloaded). Every module of mesh takes
 * node:http's values from here; its types come from node:http, at compile time only.
 */
import { createRequire } from 'node:module';
import type * as Http from 'node:http';

const http = createRequire(import.meta.url)('node:http') as typeof Http;

export const { createServer, request, STATUS_CODES } = http;
