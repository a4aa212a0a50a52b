/**
 * --max_body_size on the proxy handler, in a real gateway process in front of a real backend that
 * records what it received: a Content-Length over the limit gets 413 before the backend is
 * contacted; a chunked body over it is cut at the limit (the backend sees an aborted request,
 * never the whole body) and the client gets 413, or a reset when the answer had already started.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { createRegistry } from '../../src/engines/registry/create.js';
import { tempDir, waitFor, listenLoopback } from '../helpers.js';
import { http, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

const LIMIT = 1024 * 1024; // --max_body_size=1MiB
const TOO_LARGE = JSON.stringify({ id: 'go.mesh.api', code: 413, detail: `request body larger than ${LIMIT} bytes`, status: 'Payload Too Large' });

interface Seen {
  url: string;
  received: number;
  /** 'end': the whole body arrived; 'aborted': the request was cut off. */
  outcome: 'pending' | 'end' | 'aborted';
}

async function startBackend(): Promise<{ server: Server; port: number; seen: Seen[]; close(): Promise<void> }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const s: Seen = { url: req.url ?? '', received: 0, outcome: 'pending' };
    seen.push(s);
    // /early answers at once and streams its answer, before reading the body.
    if (s.url.startsWith('/up/early')) {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('started;');
    }
    req.on('data', (c: Buffer) => (s.received += c.length));
    req.on('end', () => {
      s.outcome = 'end';
      res.end(JSON.stringify({ received: s.received }));
    });
    req.on('aborted', () => (s.outcome = 'aborted'));
    req.on('error', () => (s.outcome = s.outcome === 'end' ? 'end' : 'aborted'));
  });
  return { server, seen, ...(await listenLoopback(server)) };
}

/** True when text holds a whole answer with a Content-Length (head and body). */
function complete(text: string): boolean {
  const end = text.indexOf('\r\n\r\n');
  const length = /\r\ncontent-length: (\d+)\r\n/i.exec(text);
  return end >= 0 && !!length && text.length >= end + 4 + Number(length[1]);
}

/**
 * An upload on a raw socket: the head, then `total` bytes in 64 KiB chunks (chunked encoding, or
 * as announced by a Content-Length), each written once the previous one is taken. Stops sending as
 * soon as an answer arrives ('answer-first': sends one chunk, waits for the answer's first bytes,
 * then sends the rest whatever comes). Resolves with what was read once a whole answer with a
 * Content-Length is in, or at the close.
 */
function upload(
  port: number,
  path: string,
  total: number,
  mode: 'stop-on-answer' | 'answer-first' = 'stop-on-answer',
  framing: 'chunked' | { contentLength: number } = 'chunked',
): Promise<{ text: string; error?: string }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const parts: Buffer[] = [];
    let answered = false;
    let error: string | undefined;
    let onAnswer: (() => void) | undefined;
    const text = () => Buffer.concat(parts).toString('latin1');
    socket.on('data', (c: Buffer) => {
      answered = true;
      parts.push(c);
      onAnswer?.();
      onAnswer = undefined;
      if (complete(text())) {
        socket.destroy();
        resolve({ text: text() });
      }
    });
    socket.on('error', (err) => (error = err.message));
    socket.on('close', () => resolve({ text: text(), error }));
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')));
    const chunked = framing === 'chunked';
    socket.write(`POST ${path} HTTP/1.1\r\nhost: test\r\n${chunked ? 'transfer-encoding: chunked' : `content-length: ${framing.contentLength}`}\r\n\r\n`);
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    let sent = 0;
    const next = () => {
      if ((answered && mode === 'stop-on-answer') || socket.destroyed) return;
      if (mode === 'answer-first' && sent > 0 && !answered) {
        onAnswer = next; // the answer's head first, then the rest of the body
        return;
      }
      if (sent >= total) {
        if (chunked) socket.write('0\r\n\r\n');
        return;
      }
      sent += chunk.length;
      if (chunked) socket.write(`${chunk.length.toString(16)}\r\n`);
      socket.write(chunk);
      socket.write(chunked ? '\r\n' : '', () => setImmediate(next));
    };
    next();
  });
}

describe('proxy handler: --max_body_size', () => {
  const dir = tempDir('mesh-proxy-limit-');
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let gw: GatewayProcess;

  before(async () => {
    const registry = createRegistry('local', dir.path);
    backend = await startBackend();
    await registry.register({ name: 'go.mesh.srv.up', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'up-1', address: '127.0.0.1', port: backend.port, metadata: {} }] });
    gw = await startGatewayProcess(dir.path, ['--handler=proxy', '--namespace=go.mesh.srv', '--max_body_size=1MiB']);
  });
  after(async () => {
    await gw?.stop();
    await backend?.close();
    dir.cleanup();
  });

  it('a body of exactly the limit passes, by Content-Length and chunked', async () => {
    const res = await http('POST', `${gw.url}/up/exact`, { body: Buffer.alloc(LIMIT, 0x61) });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json(), { received: LIMIT });
    const chunked = await upload(gw.port, '/up/exact-chunked', LIMIT);
    assert.match(chunked.text, /^HTTP\/1\.1 200 /);
    assert.ok(chunked.text.endsWith(JSON.stringify({ received: LIMIT })), chunked.text);
  });

  it('a Content-Length over the limit gets 413 and the backend is never contacted', async () => {
    const before = backend.seen.length;
    // Announces 5 MiB and sends 64 KiB of it: the answer comes without the rest.
    const answer = await upload(gw.port, '/up/declared', 64 * 1024, 'stop-on-answer', { contentLength: 5 * 1024 * 1024 });
    assert.match(answer.text, /^HTTP\/1\.1 413 Payload Too Large\r\n/, answer.text);
    assert.match(answer.text, /\r\ncontent-type: application\/json\r\n/);
    assert.ok(answer.text.endsWith(`\r\n\r\n${TOO_LARGE}`), answer.text);
    assert.equal(backend.seen.length, before, 'no request reached the backend');
    // With a client that sends it all.
    const res = await http('POST', `${gw.url}/up/declared`, { body: Buffer.alloc(LIMIT + 1, 0x61) });
    assert.equal(res.status, 413);
    assert.equal(res.text, TOO_LARGE);
    assert.equal(backend.seen.length, before, 'no request reached the backend');
  });

  it('a chunked body over the limit gets 413; the backend got an aborted request, never the whole body', async () => {
    const before = backend.seen.length;
    const answer = await upload(gw.port, '/up/chunked', 5 * 1024 * 1024);
    assert.match(answer.text, /^HTTP\/1\.1 413 Payload Too Large\r\n/, answer.text);
    assert.ok(answer.text.endsWith(`\r\n\r\n${TOO_LARGE}`), answer.text);
    await waitFor(() => backend.seen.length > before && backend.seen.at(-1)!.outcome === 'aborted');
    const seen = backend.seen.at(-1)!;
    assert.equal(seen.url, '/up/chunked');
    assert.ok(seen.received <= LIMIT, `the backend received ${seen.received} bytes, at most the limit`);
  });

  it('when the answer had started, the client connection is reset and the backend request aborted', async () => {
    const before = backend.seen.length;
    const answer = await upload(gw.port, '/up/early', 5 * 1024 * 1024, 'answer-first');
    // The head and the first bytes came; then the connection was cut, before a complete answer.
    assert.match(answer.text, /^HTTP\/1\.1 200 OK\r\n/, answer.text);
    assert.ok(!answer.text.includes('\r\n0\r\n\r\n'), 'the chunked answer never ended');
    await waitFor(() => backend.seen.length > before && backend.seen.at(-1)!.outcome === 'aborted');
    assert.ok(backend.seen.at(-1)!.received <= LIMIT);
  });
});
