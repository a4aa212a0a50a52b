/**
 * Runs go.mesh.api.counter, a service with streaming endpoints: `npx tsx examples/counter.ts [mesh flags]`.
 * Through `mesh api`: `/counter/count/up` (a server stream: SSE or WebSocket) and
 * `/counter/echo/chat` (a bidirectional stream: WebSocket). See docs/gateway.md "Streaming endpoints".
 */
import { runService, type StreamContext } from '../src/index.js';

await runService((mesh) => {
  mesh
    .service({ name: 'go.mesh.api.counter' })
    .stream(
      'Count.Up',
      async function* (req: { to?: number | string }, ctx: StreamContext) {
        const to = Number(req.to ?? 3);
        for (let n = 1; n <= to && !ctx.signal.aborted; n++) {
          yield { n };
          await new Promise((r) => setTimeout(r, 100));
        }
      },
      { kind: 'server' },
    )
    .stream(
      'Echo.Chat',
      async function* (requests: AsyncIterable<{ say: string }>) {
        for await (const r of requests) yield { echo: r.say };
      },
      { kind: 'bidi' },
    );
});
