/**
 * @fastify/http-proxy in front of the backend, with Fastify's defaults (logger off).
 * Usage: node --import tsx bench/servers/fastify-proxy.ts PORT UPSTREAM_PORT
 */
import Fastify from 'fastify';
import proxy from '@fastify/http-proxy';

const port = Number(process.argv[2]);
const app = Fastify({ logger: false });
await app.register(proxy, { upstream: `http://127.0.0.1:${Number(process.argv[3])}` });
await app.listen({ host: '127.0.0.1', port });
const stop = () => void app.close().finally(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
