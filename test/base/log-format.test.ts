/**
 * Log formats: readable text lines on a terminal, JSON lines with level names elsewhere,
 * --log_format (and MESH_LOG_FORMAT) to choose; colour only when allowed (FORCE_COLOR, NO_COLOR);
 * admin /logging changes levels at run time in either format; a disabled level formats nothing.
 * In-process checks of the formatter with a frozen clock, then `mesh list services` and `mesh api`
 * as real processes.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Logging, chooseLogFormat, colorEnabled, formatTextLine, type LogFormat } from '../../src/base/util/log.js';
import { parseArgs, FlagError } from '../../src/cli/flags.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import { LOCAL_DB_FILE } from '../../src/engines/registry/local/index.js';
import { PRINTED, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { http } from '../fixtures/gateway-helpers.js';

/** 2024-01-02 03:04:05.006 local time. */
const FROZEN = new Date(2024, 0, 2, 3, 4, 5, 6).getTime();

function capture(format: LogFormat | undefined, options: { level?: 'trace' | 'info' | 'warning'; color?: boolean; isTTY?: boolean } = {}) {
  const lines: string[] = [];
  const destination = { write: (s: string) => void lines.push(s), isTTY: options.isTTY };
  const logging = new Logging({ level: options.level ?? 'info', format, color: options.color ?? false, now: () => FROZEN, destination });
  return { logging, lines };
}

/** An error with a known stack (and an own property, as Node's system errors have). */
function knownError(): Error {
  const err = Object.assign(new Error('connect refused'), { code: 'ECONNREFUSED' });
  err.stack = 'Error: connect refused\n    at connect (node:net:1:2)\n    at main (/srv/app.js:10:5)';
  return err;
}

describe('log format: choice', () => {
  it('text on a terminal, JSON elsewhere; --log_format wins either way', () => {
    assert.equal(chooseLogFormat(undefined, true), 'text');
    assert.equal(chooseLogFormat(undefined, false), 'json');
    assert.equal(chooseLogFormat('json', true), 'json');
    assert.equal(chooseLogFormat('text', false), 'text');
    assert.equal(chooseLogFormat('json', false), 'json');
    assert.equal(chooseLogFormat('text', true), 'text');
  });

  it('the choice follows the log stream: a TTY destination gets text, a pipe JSON', () => {
    assert.equal(capture(undefined, { isTTY: true }).logging.format, 'text');
    assert.equal(capture(undefined, { isTTY: false }).logging.format, 'json');
    assert.equal(capture('json', { isTTY: true }).logging.format, 'json');
    assert.equal(capture('text', { isTTY: false }).logging.format, 'text');
    // The process default is stderr: piped under the test runner.
    assert.equal(new Logging({ level: 'off' }).format, process.stderr.isTTY ? 'text' : 'json');
  });

  it('--log_format and MESH_LOG_FORMAT: text, json, unset; anything else is a flag error naming the flag', () => {
    assert.equal(parseArgs(['--log_format=text'], {}).config.log_format, 'text');
    assert.equal(parseArgs(['--log_format', 'json'], {}).config.log_format, 'json');
    assert.equal(parseArgs([], {}).config.log_format, undefined);
    assert.equal(parseArgs([], { MESH_LOG_FORMAT: 'text' }).config.log_format, 'text');
    assert.equal(parseArgs(['--log_format=json'], { MESH_LOG_FORMAT: 'text' }).config.log_format, 'json');
    for (const [argv, env] of [[['--log_format=pretty'], {}], [[], { MESH_LOG_FORMAT: 'JSON' }], [['--log_format='], {}]] as const) {
      assert.throws(
        () => parseArgs([...argv], { ...env }),
        (err: unknown) =>
          err instanceof FlagError && err.exitCode === 2 && /^invalid value "[^"]*" for (flag --log_format|MESH_LOG_FORMAT \(--log_format\)): use one of text, json$/.test(err.message),
      );
    }
  });

  it('colour: FORCE_COLOR forces it (not 0/false), NO_COLOR forbids it, otherwise a colour terminal', () => {
    const tty = { isTTY: true, hasColors: () => true };
    const dumb = { isTTY: true, hasColors: () => false };
    const pipe = { isTTY: false };
    assert.equal(colorEnabled(tty, {}), true);
    assert.equal(colorEnabled(dumb, {}), false);
    assert.equal(colorEnabled(pipe, {}), false);
    assert.equal(colorEnabled(pipe, { FORCE_COLOR: '1' }), true);
    assert.equal(colorEnabled(pipe, { FORCE_COLOR: '' }), true);
    assert.equal(colorEnabled(tty, { FORCE_COLOR: '0' }), false);
    assert.equal(colorEnabled(tty, { FORCE_COLOR: 'false' }), false);
    assert.equal(colorEnabled(tty, { NO_COLOR: '1' }), false);
    assert.equal(colorEnabled(pipe, { NO_COLOR: '1', FORCE_COLOR: '1' }), false);
    assert.equal(colorEnabled(tty, { NO_COLOR: '' }), true, 'an empty NO_COLOR is unset');
  });
});

describe('log format: text lines', () => {
  it('the request line, exactly: time, padded level, subsystem, message, key=value', () => {
    const { logging, lines } = capture('text');
    logging.get('http').info({ front: 'gateway', method: 'GET', path: '/hello', status: 200, ms: 1.25 }, 'request');
    assert.deepEqual(lines, ['03:04:05.006 INFO     http request front=gateway method=GET path=/hello status=200 ms=1.25\n']);
  });

  it('every level name, padded to one column; child bindings come first among the fields', () => {
    const { logging, lines } = capture('text', { level: 'trace' });
    const log = logging.get('upstream').child({ cluster: 'go.mesh.srv.a' });
    log.trace('t');
    log.debug('d');
    log.info('i');
    log.warn('w');
    log.error({ host: '10.0.0.1:80' }, 'e');
    log.fatal('c');
    assert.deepEqual(lines, [
      '03:04:05.006 TRACE    upstream t cluster=go.mesh.srv.a\n',
      '03:04:05.006 DEBUG    upstream d cluster=go.mesh.srv.a\n',
      '03:04:05.006 INFO     upstream i cluster=go.mesh.srv.a\n',
      '03:04:05.006 WARNING  upstream w cluster=go.mesh.srv.a\n',
      '03:04:05.006 ERROR    upstream e cluster=go.mesh.srv.a host=10.0.0.1:80\n',
      '03:04:05.006 CRITICAL upstream c cluster=go.mesh.srv.a\n',
    ]);
  });

  it("an error's message inline (with its own properties), its stack on the following lines, indented", () => {
    const { logging, lines } = capture('text');
    logging.get('admin').error({ err: knownError(), path: '/quitquitquit' }, 'admin request failed');
    logging.get('client').error(knownError());
    assert.deepEqual(lines, [
      '03:04:05.006 ERROR    admin admin request failed err="connect refused" err.code=ECONNREFUSED path=/quitquitquit\n' +
        '    Error: connect refused\n' +
        '        at connect (node:net:1:2)\n' +
        '        at main (/srv/app.js:10:5)\n',
      '03:04:05.006 ERROR    client connect refused err="connect refused" err.code=ECONNREFUSED\n' +
        '    Error: connect refused\n' +
        '        at connect (node:net:1:2)\n' +
        '        at main (/srv/app.js:10:5)\n',
    ]);
  });

  it('key=value quoting: bare when safe, a JSON string when not; control bytes never reach the terminal raw', () => {
    const line = formatTextLine({
      level: 'info',
      time: FROZEN,
      subsystem: 'http',
      msg: 'two\nlines \x1b[31mred',
      plain: 'abc-1.2:3/x?y&z',
      empty: '',
      space: 'a b',
      quote: 'say "hi"',
      single: "it's",
      equals: 'a=b',
      backslash: 'C:\\tmp',
      tab: 'a\tb',
      esc: '\x1b[2J',
      csi: '\x9b2J',
      unicode: 'héllo→',
      num: 42,
      neg: -1.5,
      yes: true,
      nothing: null,
      list: ['a', 'b c'],
      obj: { a: 1, b: 'x\x1b' },
    });
    assert.equal(
      line,
      '03:04:05.006 INFO     http two\\u000alines \\u001b[31mred' +
        ' plain=abc-1.2:3/x?y&z empty="" space="a b" quote="say \\"hi\\"" single="it\'s" equals="a=b" backslash="C:\\\\tmp"' +
        ' tab="a\\tb" esc="\\u001b[2J" csi="\\u009b2J" unicode=héllo→ num=42 neg=-1.5 yes=true nothing=null' +
        ' list=["a","b c"] obj={"a":1,"b":"x\\u001b"}',
    );
  });

  it('colour on: the level name only, in its colour; off: no escape byte at all', () => {
    const on = capture('text', { color: true, level: 'trace' });
    const off = capture('text', { color: false, level: 'trace' });
    for (const { logging } of [on, off]) {
      const log = logging.get('main');
      log.info('started');
      log.warn('slow');
      log.error('failed');
      log.debug('detail');
    }
    assert.deepEqual(on.lines, [
      '03:04:05.006 \x1b[32mINFO\x1b[0m     main started\n',
      '03:04:05.006 \x1b[33mWARNING\x1b[0m  main slow\n',
      '03:04:05.006 \x1b[31mERROR\x1b[0m    main failed\n',
      '03:04:05.006 \x1b[36mDEBUG\x1b[0m    main detail\n',
    ]);
    assert.ok(!off.lines.join('').includes('\x1b'));
  });
});

describe('log format: JSON lines', () => {
  it('level names (as --log_level spells them), ISO time, pid, subsystem, fields, msg', () => {
    const { logging, lines } = capture('json', { level: 'trace' });
    const log = logging.get('http');
    log.info({ front: 'gateway', method: 'GET', path: '/hello', status: 200, ms: 1.25 }, 'request');
    assert.equal(
      lines[0],
      `{"level":"info","time":"${new Date(FROZEN).toISOString()}","pid":${process.pid},"subsystem":"http","front":"gateway","method":"GET","path":"/hello","status":200,"ms":1.25,"msg":"request"}\n`,
    );
    log.trace('t');
    log.debug('d');
    log.warn('w');
    log.error({ err: knownError() }, 'e');
    log.fatal('c');
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, any>);
    assert.deepEqual(
      parsed.map((p) => p.level),
      ['info', 'trace', 'debug', 'warning', 'error', 'critical'],
    );
    assert.deepEqual(parsed[4]!.err, { type: 'Error', message: 'connect refused', stack: knownError().stack, code: 'ECONNREFUSED' });
  });
});

describe('log format: levels at run time and the cost', () => {
  for (const format of ['text', 'json'] as const) {
    it(`${format}: above the level nothing is serialized or formatted; setLevel (admin /logging) turns it on and off`, () => {
      const { logging, lines } = capture(format, { level: 'warning' });
      const log = logging.get('http');
      let reads = 0;
      const fields = {
        get path() {
          reads++;
          return '/x';
        },
      };
      log.info(fields, 'request');
      assert.equal(log.isLevelEnabled('info'), false);
      assert.deepEqual([lines.length, reads], [0, 0]);
      logging.setLevel('http', 'info');
      log.info(fields, 'request');
      assert.deepEqual([lines.length, reads], [1, 1]);
      assert.match(lines[0]!, format === 'text' ? /^03:04:05\.006 INFO {5}http request path=\/x\n$/ : /"level":"info".*"path":"\/x","msg":"request"\}\n$/);
      logging.setAll('warning');
      log.info(fields, 'request');
      assert.deepEqual([lines.length, reads], [1, 1]);
    });
  }

  it('measure: one per-request info line as text vs JSON, and below the level (diagnostic only)', (t) => {
    const N = 20_000;
    const sink = { write: (_: string) => undefined };
    const run = (format: LogFormat, level: 'info' | 'warning') => {
      const log = new Logging({ level, format, color: false, destination: sink }).get('http');
      const line = (i: number) => log.info({ front: 'gateway', method: 'GET', path: `/hello/${i}`, status: 200, ms: 0.123 }, 'request');
      for (let i = 0; i < 2000; i++) line(i); // warm up
      const start = process.hrtime.bigint();
      for (let i = 0; i < N; i++) line(i);
      return Number(process.hrtime.bigint() - start) / N;
    };
    const json = run('json', 'info');
    const text = run('text', 'info');
    const off = run('text', 'warning');
    t.diagnostic(`per info line: json ${Math.round(json)} ns, text ${Math.round(text)} ns (x${(text / json).toFixed(2)}), level above info ${Math.round(off)} ns`);
    assert.ok(json > 0 && text > 0 && off >= 0);
  });
});

/** Writes a node whose address breaks the registry rules, as a program other than mesh would. */
function writeBadNode(dir: string): void {
  const db = new Database(join(dir, LOCAL_DB_FILE));
  try {
    db.transaction(() => {
      db.prepare(`INSERT OR IGNORE INTO services (name, version, metadata, endpoints) VALUES (?, ?, '{}', '[]')`).run('go.mesh.srv.bad', 'v1');
      db.prepare(`INSERT OR REPLACE INTO nodes (service, version, id, address, port, metadata, expires_at) VALUES (?, ?, ?, ?, ?, '{}', NULL)`).run('go.mesh.srv.bad', 'v1', 'x', '127.0.0.1 x', 1);
      const rev = (db.prepare(`UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value`).get() as { value: number }).value;
      db.prepare(`INSERT OR IGNORE INTO changes (revision, service) VALUES (?, ?)`).run(rev, 'go.mesh.srv.bad');
    })();
  } finally {
    db.close();
  }
}

const TEXT_LINE = /^\d\d:\d\d:\d\d\.\d{3} (TRACE|DEBUG|INFO|WARNING|ERROR|CRITICAL) +[a-z]+ \S/;

describe('log format: mesh list services as a real process', () => {
  const dir = tempDir('mesh-log-format-');
  after(() => dir.cleanup());

  it('the warning about a bad stored record: a text line or a JSON line on stderr; stdout is the listing either way', async () => {
    const registry = createRegistry('local', dir.path);
    await registry.close();
    writeBadNode(dir.path);
    const base = ['list', 'services', `--registry_address=${dir.path}`];
    const text = await runCli([...base, '--log_format=text'], { FORCE_COLOR: '0' });
    assert.equal(text.code, 0, text.stderr);
    const textLines = text.stderr.split('\n').filter((l) => l !== '');
    assert.ok(textLines.length > 0, 'a warning was logged');
    for (const l of textLines) assert.match(l, TEXT_LINE);
    assert.ok(textLines.some((l) => / WARNING  registry invalid registry record skipped backend=local service="\\"go\.mesh\.srv\.bad\\"" dropped=1 problem="node /.test(l)), text.stderr);
    assert.ok(!text.stderr.includes('{'), 'no JSON in the text format');

    const json = await runCli([...base], { MESH_LOG_FORMAT: 'json' });
    assert.equal(json.code, 0, json.stderr);
    const entries = json.stderr
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.ok(entries.some((e) => e.level === 'warning' && e.subsystem === 'registry' && e.msg === 'invalid registry record skipped'), json.stderr);
    for (const e of entries) assert.equal(typeof e.level, 'string');
    assert.equal(text.stdout, json.stdout);

    // Piped and no flag: JSON.
    const auto = await runCli([...base]);
    assert.equal(auto.code, 0, auto.stderr);
    assert.ok(auto.stderr.split('\n').filter((l) => l !== '').every((l) => typeof JSON.parse(l).level === 'string'), auto.stderr);
  });

  it('a bad --log_format or MESH_LOG_FORMAT exits 2 naming the flag', async () => {
    const flag = await runCli(['list', 'services', `--registry_address=${dir.path}`, '--log_format=pretty']);
    assert.deepEqual([flag.code, flag.stdout, flag.stderr], [2, '', 'mesh: invalid value "pretty" for flag --log_format: use one of text, json\n']);
    const env = await runCli(['list', 'services', `--registry_address=${dir.path}`], { MESH_LOG_FORMAT: 'xml' });
    assert.deepEqual([env.code, env.stdout, env.stderr], [2, '', 'mesh: invalid value "xml" for MESH_LOG_FORMAT (--log_format): use one of text, json\n']);
  });
});

describe('log format: mesh api as a real process, levels changed by admin /logging', () => {
  const dir = tempDir('mesh-log-format-api-');
  const procs: RunningProcess[] = [];
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    dir.cleanup();
  });

  async function startApi(args: string[], env: Record<string, string>) {
    const proc = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', `--registry_address=${dir.path}`, '--log_level=warning', ...args], env);
    procs.push(proc);
    const port = await proc.waitForPort(PRINTED.api, 15000);
    const adminPort = await proc.waitForPort(PRINTED.apiAdmin);
    return { proc, url: `http://127.0.0.1:${port}`, admin: `http://127.0.0.1:${adminPort}` };
  }

  /**
   * An admin operation at warning (not logged), /logging?admin=info, a second operation (logged at
   * info by the admin subsystem): the lines of the second.
   */
  async function operationLines(api: { proc: RunningProcess; url: string; admin: string }): Promise<string[]> {
    assert.equal((await http('POST', `${api.admin}/reset_counters?first-unlogged`)).status, 200);
    const set = await http('POST', `${api.admin}/logging?admin=info`);
    assert.equal(set.status, 200, set.text);
    assert.equal((await http('POST', `${api.admin}/reset_counters?second-logged`)).status, 200);
    await waitFor(() => api.proc.output().includes('second-logged'), 10000);
    const out = api.proc.output();
    assert.ok(!out.includes('first-unlogged'), 'the operation at level warning was not logged');
    return out.split('\n').filter((l) => l.includes('second-logged'));
  }

  it('--log_format=text with FORCE_COLOR: a coloured request line; with NO_COLOR too: none', async () => {
    const [colored, plain] = await Promise.all([
      startApi(['--log_format=text'], { FORCE_COLOR: '1' }),
      startApi([], { MESH_LOG_FORMAT: 'text', FORCE_COLOR: '1', NO_COLOR: '1' }),
    ]);
    const [c, p] = await Promise.all([operationLines(colored), operationLines(plain)]);
    assert.equal(c.length, 1);
    assert.match(c[0]!, /^\d\d:\d\d:\d\d\.\d{3} \x1b\[32mINFO\x1b\[0m {5}admin admin operation method=POST url=\/reset_counters\?second-logged$/);
    assert.equal(p.length, 1);
    assert.match(p[0]!, /^\d\d:\d\d:\d\d\.\d{3} INFO {5}admin admin operation method=POST url=\/reset_counters\?second-logged$/);
    assert.ok(!plain.proc.output().includes('\x1b'));
  });

  it('--log_format=json (over MESH_LOG_FORMAT=text): JSON lines with level names', async () => {
    const api = await startApi(['--log_format=json'], { MESH_LOG_FORMAT: 'text', FORCE_COLOR: '1' });
    const lines = await operationLines(api);
    assert.equal(lines.length, 1);
    const entry = JSON.parse(lines[0]!) as Record<string, unknown>;
    assert.deepEqual(
      { level: entry.level, subsystem: entry.subsystem, msg: entry.msg, method: entry.method, url: entry.url },
      { level: 'info', subsystem: 'admin', msg: 'admin operation', method: 'POST', url: '/reset_counters?second-logged' },
    );
    // Back to warning: the next operation is not logged; a line after it (at info) shows the order.
    assert.equal((await http('POST', `${api.admin}/logging?level=warning`)).status, 200);
    await http('POST', `${api.admin}/reset_counters?third-unlogged`);
    assert.equal((await http('POST', `${api.admin}/logging?admin=info`)).status, 200);
    await http('POST', `${api.admin}/reset_counters?fourth-logged`);
    await waitFor(() => api.proc.output().includes('fourth-logged'), 10000);
    assert.ok(!api.proc.output().includes('third-unlogged'));
  });
});
