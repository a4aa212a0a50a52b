/**
 * `mesh top` in a real terminal (tmux), against a real `mesh api` found through the registry: the
 * busiest paths counted, the table drawn again in place (one header on the screen, never a
 * scroll), a path sent to the gateway with an encoded terminal escape shown encoded, Ctrl-C exits 0.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { binary, CLI, http, tempDir, waitFor } from '../helpers.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const tmuxPath = binary('MESH_TEST_TMUX', 'tmux', 'install Debian\'s tmux');

describe('mesh top', { skip: tmuxPath === undefined }, () => {
  const dir = tempDir();
  const socket = `mesh-top-${process.pid}`;
  const tmux = (...args: string[]) => spawnSync(tmuxPath!, ['-L', socket, ...args], { encoding: 'utf8' });
  const screen = () => tmux('capture-pane', '-p', '-t', 'top').stdout;
  let registry: Registry;
  let plain: PlainApp;
  let api: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    api = await startGatewayProcess(dir.path, ['--handler=proxy']);
  });

  after(async () => {
    tmux('kill-server');
    await api?.stop();
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('counts the busiest paths and draws the table again in place; Ctrl-C exits 0', async () => {
    const errors = join(dir.path, 'top.err');
    const command = `'${process.execPath}' '${CLI}' top --registry_address='${dir.path}' --interval=200ms --path=/plain 2>'${errors}'; echo "exit=$?"; sleep 60`;
    const started = tmux('new-session', '-d', '-s', 'top', '-x', '120', '-y', '30', command);
    assert.equal(started.status, 0, started.stderr);
    await waitFor(() => /mesh top: 0 requests from 1 process\(es\)/.test(screen()), 15000);
    // The tap is attached once the command said so on stderr.
    await waitFor(() => existsSync(errors) && readFileSync(errors, 'utf8').includes(': tapping'), 15000);
    for (let i = 0; i < 5; i++) assert.equal((await http('GET', `${api.url}/plain/a`)).status, 200);
    for (let i = 0; i < 2; i++) assert.equal((await http('GET', `${api.url}/plain/b`)).status, 200);
    assert.equal((await http('GET', `${api.url}/plain/%1B%5B2Jforged`)).status, 200);
    assert.equal((await http('GET', `${api.url}/other`)).status, 404);
    let text = '';
    await waitFor(() => {
      text = screen();
      return text.includes('mesh top: 8 requests');
    }, 15000);
    const lines = text.split('\n');
    const header = lines.findIndex((l) => /^SERVICE +METHOD +PATH +COUNT +SUCCESS +BEST +WORST +LAST$/.test(l));
    assert.ok(header > 0, text);
    assert.match(lines[header + 1]!, /^go\.mesh\.api\.plain +GET +\/plain\/a +5 +100\.0% +[\d.]+ms +[\d.]+ms +[\d.]+ms$/);
    assert.match(lines[header + 2]!, /^go\.mesh\.api\.plain +GET +\/plain\/b +2 +100\.0% /);
    // The path's normal form keeps an encoded escape encoded: it never reaches the terminal decoded.
    assert.match(text, /\/plain\/%1B%5B2Jforged +1 /);
    assert.ok(!text.includes('\u001b'));
    assert.equal(text.match(/^mesh top: /gm)?.length, 1, `drawn in place, not scrolled:\n${text}`);
    assert.ok(!text.includes('/other'));
    tmux('send-keys', '-t', 'top', 'C-c');
    await waitFor(() => screen().includes('exit=0'), 15000);
  });
});
