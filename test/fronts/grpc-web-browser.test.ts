/**
 * gRPC-Web from a real browser: the example of docs/grpc.md ("gRPC-Web: browsers calling gRPC
 * services through the gateway", examples/grpc-web/), run as written there: its three commands
 * (the framework service serving gRPC, the page's server, `mesh api --cors=<the page's origin>`),
 * with their own MESH_HOME (the registry they share) and free ports for 8000 and 8080. Chromium
 * (MESH_TEST_CHROMIUM, through playwright-core, as in test/fronts/browser.test.ts) opens the page,
 * whose script calls the service cross-origin with the `grpc-web` client library (-text mode):
 * a unary call, one refused with INVALID_ARGUMENT (a status that comes as headers) and a server
 * stream; the test reads what the page shows, and what the gateway counted.
 * Skipped without chromium, a failure with MESH_TEST_REQUIRE_ENGINES=1.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { engine, freePort, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const CHROMIUM = engine('MESH_TEST_CHROMIUM', 'chromium');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'];

/** The shell block of `file` that has `at`: its command lines. */
function commandsOf(file: string, at: string): string[] {
  const blocks = [...readFileSync(join(ROOT, file), 'utf8').matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
  const found = blocks.filter((b) => b.includes(at));
  assert.equal(found.length, 1, `${file}: one sh block with "${at}"`);
  return found[0]!.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'));
}

describe('gRPC-Web from chromium: the example of docs/grpc.md', { skip: CHROMIUM ? false : 'chromium not available: set MESH_TEST_CHROMIUM (e.g. /usr/bin/chromium)' }, () => {
  const home = tempDir('mesh-grpc-web-home-');
  const procs: RunningProcess[] = [];
  let browser: Browser;
  let pageUrl: string;
  let admin: string;

  before(async () => {
    const commands = commandsOf('docs/grpc.md', 'npx tsx examples/grpc-web/service.ts');
    assert.deepEqual(commandsOf('examples/grpc-web/README.md', 'npx tsx examples/grpc-web/service.ts'), commands, 'the example README has the commands of docs/grpc.md');
    assert.equal(commands.length, 3);
    const env = { MESH_HOME: home.path };
    const gatewayPort = await freePort();
    let pagePort = 0;
    /** Runs one command of the block: `npx tsx FILE ...` with tsx, `mesh ...` with this checkout's CLI. */
    const run = (line: string) => {
      const args = line
        .replace('--port=8000', '--port=0')
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${gatewayPort}`)
        .replaceAll('127.0.0.1:8000', `127.0.0.1:${pagePort}`)
        .split(' ');
      const proc = args[0] === 'npx' && args[1] === 'tsx' ? startProcess(['--import', 'tsx', ...args.slice(2)], env, '', ROOT) : (assert.equal(args[0], 'mesh'), startProcess([...args.slice(1), '--admin_address=127.0.0.1:0'], env, undefined, ROOT));
      procs.push(proc);
      return proc;
    };
    const [service, page, api] = commands;
    // The service registered before the gateway looks it up.
    await run(service!).waitForOutput(/"msg":"service started"/, 60_000);
    pagePort = await run(page!).waitForPort(/page on http:\/\/127\.0\.0\.1:(\d+)/, 60_000);
    const gateway = run(api!);
    await gateway.waitForPort(/mesh api listening on http:\/\/\S+:(\d+) /, 15_000);
    admin = `http://127.0.0.1:${await gateway.waitForPort(/mesh api admin on http:\/\/\S+:(\d+)/)}`;
    pageUrl = `http://127.0.0.1:${pagePort}/`;
    browser = await chromium.launch({ executablePath: CHROMIUM!, headless: true, args: ARGS });
  });

  after(async () => {
    await browser?.close();
    for (const p of procs.reverse()) await p.stop();
    home.cleanup();
  });

  it('the page calls SayHello and the Count stream cross-origin, and shows the replies and the statuses', async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      const grpcRequests: Array<{ method: string; url: string; type?: string }> = [];
      page.on('request', (r) => {
        if (new URL(r.url()).port !== new URL(pageUrl).port) grpcRequests.push({ method: r.method(), url: r.url(), type: r.headers()['content-type'] });
      });
      const problems: string[] = [];
      page.on('pageerror', (e) => problems.push(e.message));
      await page.goto(pageUrl);
      await page.waitForSelector('body[data-done="true"]', { timeout: 30_000 });
      const shown = await page.evaluate(() => ({
        hello: document.getElementById('hello')!.textContent,
        error: document.getElementById('hello-error')!.textContent,
        count: [...document.querySelectorAll('#count li')].map((li) => li.textContent),
        status: document.getElementById('count-status')!.textContent,
      }));
      assert.deepEqual(problems, []);
      assert.deepEqual(shown, { hello: 'Hello Ann', error: 'error 3: name is empty', count: ['Hello Ann #1', 'Hello Ann #2', 'Hello Ann #3'], status: 'done' });
      // Cross-origin gRPC-Web calls, in -text mode.
      const calls = grpcRequests.filter((r) => r.method === 'POST');
      assert.deepEqual(calls.map((r) => new URL(r.url).pathname).sort(), ['/helloworld.Greeter/Count', '/helloworld.Greeter/SayHello', '/helloworld.Greeter/SayHello']);
      for (const c of calls) assert.equal(c.type, 'application/grpc-web-text');
    } finally {
      await context.close();
    }
  });

  it('the gateway counted the calls per method and status', async () => {
    const stats = await waitFor(async () => {
      const text = await (await fetch(`${admin}/stats?filter=${encodeURIComponent('grpc\\.helloworld')}`)).text();
      return /Greeter\.Count\.success: 1/.test(text) && /Greeter\.SayHello\.3: 1/.test(text) ? text : undefined;
    });
    assert.match(stats, /cluster\.go\.mesh\.srv\.greeter\.grpc\.helloworld\.Greeter\.SayHello\.success: 1/);
  });
});
