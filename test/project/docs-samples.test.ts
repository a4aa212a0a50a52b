/**
 * The samples of the README and docs/, run as written.
 *
 * The rule, for every file in COVERED: a fenced shell block (```sh, ```bash, ```shell, ```console,
 * or ``` with no language whose lines start with `$ `) that starts a process or calls the mesh (a
 * command `mesh`, `npx`, `curl`, `grpcurl`, `node`, `npm`, `python`/`python3`, `tsx`, also after
 * `VAR=x`, a pipe, `&&`, `$(`, `<(`) is either
 *   - run by a scenario below (named by a piece of text found in that block only), or
 *   - run by another test file, named in ELSEWHERE (which must mention the doc), or
 *   - marked on the line just before its fence with `<!-- sample: not run: REASON -->` (a reason
 *     is required: a Kubernetes cluster, a public DNS name, a second machine...).
 * The first test fails, naming file:line, for any block that is none of these, and for any
 * scenario step or ELSEWHERE entry whose text no longer finds exactly one block.
 * Blocks left alone by the rule: output (what a command prints: ``` with no `$ ` lines, `json`),
 * diagrams (`mermaid`), and code (`ts`, `js`, `python`, `proto`): a code sample the doc says to
 * save and run is saved and run by its scenario (`saved`), and the README's and docs/api.md's
 * TypeScript is type-checked against the packed package by test/project/package.test.ts. Config blocks:
 * a ```yaml block with `kind: HTTPRoute` is parsed by the real route file loader (dist/), one with
 * `listeners:` by the real proxy config loader; a fragment (neither) is left alone.
 *
 * How a block runs: in a scenario (one per doc section, one at a time: the docs use fixed ports
 * such as 8080, 8081, 9901, 10000, as written), with bash, in a fresh directory holding symlinks
 * to the checkout's files (so `examples/...`, `dist/...` resolve and files the sample writes stay
 * there), with HOME and MESH_HOME fresh temporary directories, and a PATH whose `mesh` runs this
 * tree's dist/src/cli/main.js. Shims on that PATH: `npx mesh ...` is that `mesh`, `npx tsx|tsc`
 * the checkout's (or the project's) own; `npm start` in the checkout is `mesh dev` (what its
 * script runs after the build), and `npm install` and `npm run build` there do nothing (the suite
 * runs in an installed and built checkout).
 * A command ending with `&`, or one a step lists in `bg` (a server the doc leaves running in its
 * terminal), runs in the background until the end of the scenario (then its process group is
 * killed); the next command waits until it is ready: a mesh process (the CLI, a service) printed
 * `listening on` (what every mesh server and service prints once bound and registered); another
 * (a python or node app) answers on every port its command line names (or the step lists).
 * Other commands run in order, `bash -e -o pipefail`, and must exit 0 (or the step's `exit`).
 * A transcript block (`$ ` lines) runs each `$` command and compares what it prints with the
 * lines under it. A doc written as one shell session (`export`, `kill %1`, `$SRV`) runs as one
 * (`session`): its blocks typed into one bash in order, waiting after background commands for
 * what they print. Steps assert the output the doc shows (`expect`, `expectAll`, `shows`).
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { CLI, ROOT, tempDir, waitFor } from '../helpers.js';

/** The files the rule holds for. */
const COVERED = [
  'README.md',
  'docs/routing.md',
  'docs/gateway.md',
  'docs/cli.md',
  'docs/sidecar.md',
  'docs/zero-trust.md',
  'docs/security.md',
  'docs/proxy.md',
  'docs/admin.md',
  'docs/grpc.md',
  'docs/observability.md',
  'docs/tls.md',
  'docs/mesh-ca.md',
  'docs/api.md',
  'docs/reliability.md',
  'docs/architecture.md',
  'docs/dashboard.md',
  'docs/protocol.md',
  'docs/upstream.md',
  'docs/cluster.md',
  'docs/mesh-ca-multi-host.md',
  'docs/run.md',
  'docs/xds.md',
  'docs/kubernetes.md',
];

const MARK = /^<!-- sample: not run: (\S.*\S) -->$/;
const SHELL = new Set(['sh', 'bash', 'shell', 'zsh', 'console', '']);
const STARTS = /(?:^|[|&;(]\s*|\$\(\s*|<\(\s*)(?:\w+=\S*\s+)*(?:mesh|npx|curl|grpcurl|node|npm|python3?|tsx)(?:\s|$)/;

interface Block {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  lang: string;
  body: string;
  marked?: string;
}

function blocksOf(file: string): Block[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    const mark = start > 0 ? MARK.exec(lines[start - 1]!.trim()) : null;
    blocks.push({ file, line: start + 1, lang: open[1]!, body: body.join('\n') + '\n', ...(mark ? { marked: mark[1]! } : {}) });
  }
  return blocks;
}

/** A shell block's commands: continuation lines joined, heredocs kept whole, comment lines dropped. */
function commandsOf(block: Block): string[] {
  const lines = block.body.split('\n');
  if (block.lang === '' || block.lang === 'console') return lines.filter((l) => l.startsWith('$ ')).map((l) => l.slice(2));
  const commands: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    let line = lines[i]!;
    if (line.trim() === '' || line.trimStart().startsWith('#')) continue;
    while (line.endsWith('\\') && i + 1 < lines.length) line += '\n' + lines[++i]!;
    const heredoc = /<<-?\s*'?(\w+)'?/.exec(line);
    if (heredoc) {
      while (i + 1 < lines.length && lines[i + 1]!.trim() !== heredoc[1]) line += '\n' + lines[++i]!;
      if (i + 1 < lines.length) line += '\n' + lines[++i]!;
    }
    commands.push(line);
  }
  return commands;
}

/** The part of a command line that bash sees as code: the trailing `# comment` of its first line cut off (quotes respected). */
function withoutComment(command: string): string {
  const [first, ...rest] = command.split('\n');
  let quote = '';
  for (let i = 0; i < first!.length; i++) {
    const c = first![i]!;
    if (quote) {
      if (c === quote) quote = '';
    } else if (c === "'" || c === '"') quote = c;
    else if (c === '#' && (i === 0 || /\s/.test(first![i - 1]!))) return [first!.slice(0, i).trimEnd(), ...rest].join('\n');
  }
  return command;
}

const isShell = (b: Block) => SHELL.has(b.lang);
const startsProcess = (b: Block) => isShell(b) && commandsOf(b).some((c) => STARTS.test(withoutComment(c).split('\n')[0]!));

interface Step {
  /** Text found in exactly one block of the scenario's file (or the whole text of one block). */
  at: string;
  /** Commands (by their start) run in the background although the doc runs them in the foreground (a server the doc leaves running). */
  bg?: string[];
  /** Ports a background command must answer on before the next command, when its command line names none. */
  ports?: number[];
  /** The exit status of the block's foreground commands (default 0). */
  exit?: number;
  /** Patterns the stdout of its foreground commands must match. */
  expect?: RegExp[];
  /** Patterns all its output must match (stdout and stderr, of background commands until ready too). */
  expectAll?: RegExp[];
  /** The block's background commands are alternatives: each is stopped once ready, before the next starts. */
  alternatives?: boolean;
  /**
   * A transcript's output lines that may come or not (a warning that depends on the machine), and
   * the doc's lines such a line stands in for when it comes (the `ok:` line of a check).
   */
  ignore?: { line: RegExp; replaces?: RegExp };
  /** Placeholders of the block and what the test puts there. */
  replace?: Array<[string, string]>;
  /** Each foreground command runs in a fresh directory of its own (the block shows alternatives). */
  separately?: boolean;
  /** In a session: what the step's background processes print once up, awaited after them (before the next command). */
  waitFor?: RegExp[];
  /** Text found in exactly one output block of the file: each of its lines (but `...`) is a line of the output (stdout and stderr, of background commands until ready too). */
  shows?: string;
}

interface Scenario {
  file: string;
  name: string;
  steps: Step[];
  /**
   * The doc is one shell session (its samples use `export` and job numbers, `kill %1`): every
   * block runs in one bash, in order, as typed at a prompt; a step's `waitFor` patterns are what
   * the reader waits to see (the background processes' listening lines) before the next block.
   */
  session?: boolean;
  /** Commands, not from the doc, run first: what the doc's prose says is there (a file, a built tree). */
  prepare?: string[];
  /** Commands, not from the doc, run in the background first: what the doc's prose says is running (ready as a step's are, or once `ports` answer). */
  running?: Array<string | { command: string; ports: number[] }>;
  /** Commands, not from the doc, run last: what the doc's prose says then answers. */
  then?: Array<{ command: string; expect: RegExp }>;
}

/** Blocks run by another test file, which must mention the doc (`every`: each block with that text). */
const ELSEWHERE: Array<{ file: string; at: string; by: string; every?: boolean }> = [
  { file: 'docs/run.md', at: 'mesh run --name=go.mesh.srv.python -- python3 app.py', by: 'test/cli/cli-run.test.ts', every: true },
  { file: 'docs/run.md', at: "mesh call go.mesh.srv.python Hello.Say '{\"name\":\"Ada\"}'", by: 'test/cli/cli-run.test.ts' },
  { file: 'docs/run.md', at: 'mesh run -f mesh-apps.yaml', by: 'test/cli/cli-run.test.ts' },
  { file: 'docs/run.md', at: "mesh call go.mesh.srv.relay Relay.Call '{}'", by: 'test/cli/cli-run.test.ts' },
  // The walk-through, with its fixed ports rewritten to free ones.
  { file: 'docs/xds.md', at: 'GRPC_XDS_BOOTSTRAP=bootstrap.json node client.mjs', by: 'test/project/xds-doc.test.ts' },
  // Every block of its "Envoy" section.
  { file: 'docs/xds.md', at: 'mesh envoy bootstrap --xds_address=', by: 'test/xds/envoy-bootstrap.test.ts', every: true },
  { file: 'docs/xds.md', at: "cat > routes.yaml <<'EOF'", by: 'test/xds/envoy-bootstrap.test.ts' },
  { file: 'docs/cli.md', at: 'node /path/to/checkout/dist/src/cli/main.js version', by: 'test/cli/cli-anywhere.test.ts' },
  { file: 'README.md', at: 'npm pkg set type=module', by: 'test/project/package.test.ts' },
  { file: 'README.md', at: 'npx tsc --module nodenext', by: 'test/project/package.test.ts' },
  // The gRPC-Web example, its page opened in chromium.
  { file: 'docs/grpc.md', at: 'npx tsx examples/grpc-web/service.ts', by: 'test/fronts/grpc-web-browser.test.ts' },
];

/**
 * docs/grpc.md's server: its framework service serving gRPC with the stream handlers of "Serving
 * streams", saved as greeter.ts, its types stripped into greeter.js; the .proto of the page in
 * protos/helloworld.proto.
 */
const GRPC_SERVER = [
  `mkdir -p protos && ${saved('docs/grpc.md', 'service Greeter {', 'protos/helloworld.proto')}`,
  `cat > greeter.ts <<'SAMPLE_EOF'\n${findBlock('docs/grpc.md', "svc.handle('Greeter.SayHello'").body.replace(/\n\}\);\n$/, `\n${findBlock('docs/grpc.md', "svc.stream('Greeter.Count'").body}});\n`)}SAMPLE_EOF`,
  'node_modules/.bin/esbuild greeter.ts --outfile=greeter.js --log-level=warning',
];

const SCENARIOS: Scenario[] = [
  {
    file: 'docs/xds.md',
    name: 'mesh xds says where it listens',
    steps: [
      {
        at: 'mesh xds --address=127.0.0.1:18000\n',
        bg: ['mesh xds'],
        expectAll: [/^mesh xds listening on grpc:\/\/127\.0\.0\.1:18000 \(ADS, \d+ clusters? from the local registry\)$/m, /^mesh xds admin on http:\/\/127\.0\.0\.1:9904$/m],
      },
    ],
  },
  {
    file: 'docs/cluster.md',
    name: 'A broker secret of its own',
    steps: [{ at: '(umask 077; head -c 32 /dev/urandom | base64 > mesh-broker.secret)', bg: ['mesh sidecar'] }],
    then: [{ command: 'stat -c %a mesh-broker.secret', expect: /^600\n$/ }],
  },
  {
    file: 'docs/mesh-ca-multi-host.md',
    name: 'The CA\'s signing service, a join token and a sidecar that pins the root',
    session: true,
    steps: [
      { at: 'mesh ca serve --address=127.0.0.1:9943 &', waitFor: [/^mesh ca serve listening on https:\/\/127\.0\.0\.1:9943 as spiffe:\/\/mesh\.local\/svc\/mesh\.ca \(names: 127\.0\.0\.1, localhost; clients pin --ca_root_fingerprint=sha256:[0-9a-f]{64}\)$/m] },
      { at: "mesh ca token --services='go.mesh.srv.*' --ttl=1h > token" },
      { at: 'FINGERPRINT=$(mesh ca show', bg: ['mesh sidecar'], waitFor: [/^mesh sidecar listening on /m], expect: [/^inbound listening on 127\.0\.0\.1:\d+ for go\.mesh\.srv\.payments \(mutual TLS, --mtls=strict\)$/m] },
    ],
  },
  {
    file: 'docs/observability.md',
    name: 'A bad access log format',
    steps: [{ at: "$ mesh api --access_log=stdout --access_log_format='%START_TIME% %UPSTREAM_HOSTNAME%'" }],
  },
  {
    file: 'docs/tls.md',
    name: 'HTTPS with certificate files',
    steps: [{ at: '# A throw-away self-signed pair, for trying it out:', bg: ['mesh api'], expect: [/^\{"version":"[^"]+"\}$/], expectAll: [/^mesh api listening on https:\/\/0\.0\.0\.0:8080 /m] }],
  },
  {
    file: 'docs/mesh-ca.md',
    name: 'The mesh CA: init, your own root, show, rotate',
    session: true,
    steps: [
      { at: 'export MESH_HOME=$(mktemp -d)\nmesh ca init', expect: [/^made a mesh CA in \S+\/ca\nserial\tfingerprint\tsubject\texpires\tdays_left\tsigns\n[0-9a-f]+\t[0-9A-F:]+\tCN=mesh root CA \d{4}-\d\d-\d\d [0-9a-f]{8}, O=mesh\.local\t\S+\t36\d\d\tyes\n/m] },
      { at: 'export MESH_HOME=$(mktemp -d) && cd "$MESH_HOME"', expect: [/CN=my root\t/] },
      { at: 'mesh ca show --output=json', expect: [/^\{"caDir":"[^"]+\/ca","roots":\[\{"serial":"[0-9a-f]+","fingerprint":"[0-9A-F:]+","subject":"CN=my root","notBefore":"[^"]+","notAfter":"[^"]+","daysLeft":\d+,"signs":true\}\]\}$/m] },
      { at: 'mesh ca rotate', expect: [/^new root [0-9a-f]+ \([0-9A-F:]+\) signs from now on; 2 roots trusted\nrunning processes trust it within seconds/m] },
    ],
  },
  {
    file: 'docs/grpc.md',
    name: 'A framework service serving gRPC, reached by the gateway (unary, SSE, WebSocket) and mesh call',
    prepare: GRPC_SERVER,
    steps: [
      { at: 'node greeter.js --server_protocol=grpc --proto_path=./protos', bg: ['node greeter.js'] },
      {
        at: "mesh api --proto_path=./protos --handler=rpc --namespace=go.mesh.srv\ncurl -N",
        bg: ['mesh api'],
        expect: [/^data: \{"message":"Hello Ann #1"\}\n\ndata: \{"message":"Hello Ann #2"\}\n\ndata: \{"message":"Hello Ann #3"\}\n\n\{"message":"Hello Ann"\}\n\{"message":"Hello Bob"\}\n$/],
      },
      { at: "mesh call --proto_path=./protos --stream=server go.mesh.srv.greeter Greeter.Count", expect: [/^\{"message":"Hello Ann #1"\}\n\{"message":"Hello Ann #2"\}\n\{"message":"Hello Ann #3"\}\n$/] },
    ],
  },
  {
    file: 'docs/grpc.md',
    name: 'A gRPC server registered by hand, called by mesh call, the gateway and /rpc',
    prepare: GRPC_SERVER,
    running: ['node greeter.js --server_protocol=grpc --proto_path=./protos --address=127.0.0.1:50051 --registry=memory --admin_address=off'],
    steps: [
      {
        at: `mesh register service '{"Name":"go.mesh.srv.greeter","Nodes":[{"Id":"greeter-1","Address":"127.0.0.1","Port":50051,"Metadata":{"protocol":"grpc"}}]}'\nmesh call`,
        bg: ['mesh api'],
        expect: [/^ok\n\{\n {2}"message": "Hello Ann"\n\}\n\{"message":"Hello Ann"\}$/],
      },
      { at: "mesh register service --register_ttl=30s '{\"Name\":\"go.mesh.srv.greeter\"" },
      { at: '"method":"helloworld.Greeter.SayHello"', expect: [/^\{"message":"Hello Ann"\}$/] },
    ],
  },
  {
    file: 'docs/proxy.md',
    name: 'A proxy in front of two backends, and its /routes',
    running: [
      { command: `node -e "require('node:http').createServer((req, res) => res.end(req.url)).listen(9001, '127.0.0.1')"`, ports: [9001] },
      { command: `node -e "require('node:http').createServer((req, res) => res.end(req.url)).listen(9002, '127.0.0.1')"`, ports: [9002] },
    ],
    steps: [
      {
        at: "cat > proxy.yaml <<'EOF'\nlisteners:\n  - name: ingress\n    address: 127.0.0.1:10000\n    routes:",
        bg: ['mesh proxy'],
        expect: [/^\/usersversion_info::static$/m, /backend::127\.0\.0\.1:9001::/, /backend::127\.0\.0\.1:9002::/],
        expectAll: [/^mesh proxy listener ingress on http:\/\/127\.0\.0\.1:10000 \(1 route\)$/m, /^mesh proxy admin on http:\/\/127\.0\.0\.1:9903$/m, /^mesh proxy ready: 1 static cluster, no registry$/m],
      },
      { at: "curl '127.0.0.1:9903/routes?route_config_name=ingress'", expect: [/"route_config_name": ?"ingress"/, /"version_info": ?"static"/] },
    ],
  },
  {
    file: 'docs/run.md',
    name: "Mutual TLS: an app joins the running demo's strict mesh; one run with --mtls=off gets 502 and mesh check names it",
    prepare: [saved('docs/run.md', '# app.py: python3 app.py', 'app.py')],
    running: ['mesh dev'],
    steps: [
      {
        at: 'until mesh get service go.mesh.srv.python',
        expect: [/^\{"msg": "Hello Ada", "endpoint": "Hello\.Say"\}$/m],
        expectAll: [/^mesh run: mTLS strict, as the mesh's: its 2 nodes serve mutual TLS; certificates from the mesh CA in \S+\/ca \(--mtls=off runs the app without\)$/m, /^mesh run: go\.mesh\.srv\.python: inbound listening on 127\.0\.0\.1:\d+ for go\.mesh\.srv\.python \(mutual TLS, --mtls=strict\)$/m],
      },
      {
        at: 'mesh run --mtls=off --name=go.mesh.srv.plain',
        expect: [
          /^\{"id":"go\.mesh\.api","code":502,"detail":"call go\.mesh\.srv\.plain on 127\.0\.0\.1:\d+: connection failed: err_mesh_mtls_refused: mutual TLS: node 127\.0\.0\.1:\d+ does not serve mutual TLS \(no mtls=true in its registry metadata\); not called in strict mode","status":"Bad Gateway"\}/m,
          /warning: mtls: go\.mesh\.srv\.plain node go\.mesh\.srv\.plain-\S+ at 127\.0\.0\.1:\d+ does not serve mutual TLS, while 3 nodes of the mesh do: callers with --mtls=strict \(as mesh dev's gateway\) do not call it \(502\); start it with --mtls=strict \(mesh run: --mtls=strict\)\n/,
        ],
      },
    ],
  },
  {
    file: 'docs/admin.md',
    name: '/config_dump, read with jq',
    running: ['mesh dev'],
    steps: [{ at: "curl -s localhost:9901/config_dump | jq '.configs[0].options.client_request_timeout'", expect: [/^5000\n$/] }],
  },
  {
    file: 'docs/security.md',
    name: 'The worked example of rules: API keys, scopes, a deny, a reload',
    session: true,
    prepare: [saved('docs/security.md', '  - name: greetings are public', 'rules.yaml'), saved('docs/security.md', 'alice-key-0123456789abcdef alice read,admin', 'keys.txt')],
    steps: [
      {
        at: 'mesh api --auth=key --auth_keys=keys.txt --auth_rules=rules.yaml &',
        waitFor: [/^mesh api admin on /m],
        expect: [
          /\{"id":"go\.mesh\.auth","code":401,"detail":"an API key is required \(Authorization: Bearer <key>\)","status":"Unauthorized"\}/,
          /\{"id":"go\.mesh\.auth","code":403,"detail":"access to go\.mesh\.api\.greeter Admin\.Reset needs scope admin \(rule 2\)","status":"Forbidden"\}/,
          /"name": "greetings are public"/,
        ],
      },
    ],
  },
  {
    file: 'docs/security.md',
    name: 'How paths are matched: the worked example\'s deny, encoded',
    prepare: [saved('docs/security.md', '  - name: greetings are public', 'rules.yaml'), saved('docs/security.md', 'alice-key-0123456789abcdef alice read,admin', 'keys.txt')],
    running: ['mesh api --auth=key --auth_keys=keys.txt --auth_rules=rules.yaml'],
    steps: [
      {
        at: 'curl -s localhost:8080/%69nternal/x',
        expect: [/^(\{"id":"go\.mesh\.auth","code":403,"detail":"access to go\.mesh\.api\.internal Internal\.X denied by rule 3","status":"Forbidden"\}){2}\{"id":"go\.mesh\.api","code":400,"detail":"invalid path: \\";\\" \(path parameters\) is refused","status":"Bad Request"\}\{"id":"go\.mesh\.api","code":400,"detail":"invalid path: an encoded \\"\/\\" \(%2F\) is refused","status":"Bad Request"\}$/],
      },
    ],
  },
  {
    file: 'docs/security.md',
    name: 'Upgrade: h2c is refused',
    running: ['mesh api --handler=proxy'],
    steps: [{ at: 'curl -si --http2 localhost:8080/greeter/', shows: 'HTTP/1.1 400 Bad Request\ncontent-type: application/json\ncontent-length: 171' }],
  },
  {
    file: 'docs/security.md',
    name: 'Who may call whom, tried with the demo',
    session: true,
    steps: [
      {
        at: 'mesh dev --authz_rules=rules.yaml &',
        waitFor: [/^mesh dev is running/m],
        expect: [
          /^\{\n {2}"msg": "Hello John"\n\}$/m,
          /^mesh: caller spiffe:\/\/mesh\.local\/svc\/mesh\.cli may not call go\.mesh\.srv\.greeter Debug\.Health \(denied by rule 2\) \(403 Forbidden\)$/m,
          /\{"message":"Hello John"\}/,
          /authz\.allowed: 3\nauthz\.denied: 1\n/,
          /"name": "the CLI may say hello, and nothing else"/,
        ],
      },
    ],
  },
  {
    file: 'docs/zero-trust.md',
    name: 'Zero trust in five minutes, as one shell session',
    session: true,
    steps: [
      { at: 'export MESH_HOME=$(mktemp -d)', expect: [/^made a mesh CA in \S+\/ca\nserial\tfingerprint\tsubject\texpires\tdays_left\tsigns\n[0-9a-f]+\t[0-9A-F:]+\tCN=mesh root CA /m] },
      {
        at: 'node --import tsx examples/greeter-srv.ts --mtls=permissive',
        waitFor: [/^mesh api admin on http:\/\/127\.0\.0\.1:9901$/m, /^go\.mesh\.api\.greeter listening on 127\.0\.0\.1:9091 \(node \S+\), admin on 127\.0\.0\.1:9912$/m, /^go\.mesh\.srv\.greeter listening on 127\.0\.0\.1:9090 \(node \S+\), admin on 127\.0\.0\.1:9911$/m],
      },
      { at: "curl -s 'localhost:8080/greeter/say/hello?name=John'\nnpx mesh get service go.mesh.srv.greeter", expect: [/^\{"message":"Hello John"\}service  go\.mesh\.srv\.greeter$/m, /\t127\.0\.0\.1\t9090\tbroker=http,mtls=true,protocol=mesh,registry=local,transport=http$/m] },
      { at: "curl -s 'localhost:9901/stats?filter=membership_(mtls|total)'", expect: [/^\{"msg":"Hello John"\}http\.rpc\.downstream_cx_plain_refused: 0\nhttp\.rpc\.ssl\.handshake: 1\ncluster\.go\.mesh\.api\.greeter\.membership_mtls: 1\ncluster\.go\.mesh\.api\.greeter\.membership_total: 1\n/m] },
      {
        at: 'kill $SRV $API $GW; wait',
        waitFor: [/^mesh api admin on http:\/\/127\.0\.0\.1:9901$/m, /^go\.mesh\.api\.greeter listening on 127\.0\.0\.1:9091 /m, /^go\.mesh\.srv\.greeter listening on 127\.0\.0\.1:9090 /m],
      },
      { at: "name=John'\ncurl -s 127.0.0.1:9090/", expect: [/^\{"message":"Hello John"\}\{"id":"go\.mesh\.srv\.greeter","code":400,"detail":"service go\.mesh\.srv\.greeter accepts mutual TLS only \(--mtls=strict\): call it with a mesh workload certificate","status":"Bad Request"\}/m] },
      { at: 'openssl s_client -connect 127.0.0.1:9090 </dev/null', expect: [/^X509v3 Subject Alternative Name: critical\n {4}URI:spiffe:\/\/mesh\.local\/svc\/go\.mesh\.srv\.greeter\n.*alert certificate required/m] },
      { at: "npx mesh call go.mesh.srv.greeter Say.Hello '{\"name\":\"John\"}'", expect: [/^\{\n {2}"msg": "Hello John"\n\}\n/m] },
      { at: 'cat > "$MESH_HOME/rules.yaml"', waitFor: [/^go\.mesh\.srv\.greeter listening on 127\.0\.0\.1:9090 /m] },
      {
        at: "curl -s 'localhost:9911/stats?filter=^authz'",
        expect: [
          /^\{"message":"Hello John"\}/,
          /\{"id":"go\.mesh\.authz","code":403,"detail":"caller spiffe:\/\/mesh\.local\/svc\/mesh\.api may not call go\.mesh\.srv\.greeter Say\.Hello \(denied by rule 3\)","status":"Forbidden"\}/m,
          /^mesh: caller spiffe:\/\/mesh\.local\/svc\/mesh\.cli may not call go\.mesh\.srv\.greeter Say\.Hello \(denied by rule 3\) \(403 Forbidden\)$/m,
          /^node\taddress\tstatus\ngo\.mesh\.srv\.greeter-\S+\t127\.0\.0\.1:9090\tok\n/m,
          /^authz\.allowed: 2\nauthz\.denied: 2\n/m,
        ],
      },
      { at: 'curl -s localhost:9911/certs', expect: [/"path": "workload:spiffe:\/\/mesh\.local\/svc\/go\.mesh\.srv\.greeter"/] },
      { at: "curl -s 'localhost:9911/stats?filter=ssl'\n", expect: [/^http\.rpc\.ssl\.handshake: \d+$/m, /^cluster\.go\.mesh\.srv\.greeter\.membership_mtls: 1$/m] },
    ],
  },
  {
    file: 'docs/sidecar.md',
    name: 'Try it: the demo\'s sidecar',
    steps: [
      {
        at: 'npm start            # mesh dev also starts a sidecar',
        bg: ['npm start'],
        expect: [/^\[\{"name":"go\.mesh\.api\.greeter"\},\{"name":"go\.mesh\.srv\.greeter"\}\]\{"msg":"Hello John"\}go\.mesh\.api\.greeter\ngo\.mesh\.srv\.greeter\n$/],
      },
    ],
  },
  {
    file: 'docs/sidecar.md',
    name: 'A sidecar on its own, as it says at start',
    steps: [{ at: 'mesh sidecar --address=:8081                    # all interfaces', bg: ['mesh sidecar'], alternatives: true, shows: 'app go.mesh.srv.billing at 127.0.0.1:9090: checked at' }],
  },
  {
    file: 'docs/sidecar.md',
    name: 'A plain app behind the sidecar',
    prepare: [saved('docs/sidecar.md', '// app.mjs: node app.mjs', 'app.mjs')],
    running: [{ command: 'node app.mjs', ports: [9090] }, 'mesh sidecar'],
    steps: [{ at: "curl -XPOST 'localhost:8081/registry?ttl=30s'", expect: [/\{"said":\{"hi":1\}\}$/] }],
  },
  {
    file: 'docs/sidecar.md',
    name: 'POST /rpc, JSON and form fields',
    running: ['mesh dev'],
    steps: [{ at: 'curl -XPOST localhost:8081/rpc -d service=go.mesh.srv.greeter', expect: [/^\{"msg":"Hello John"\}\{"msg":"Hello John"\}$/] }],
  },
  {
    file: 'docs/sidecar.md',
    name: 'Streaming endpoints through the sidecar: SSE and WebSockets',
    steps: [{ at: "curl -N -H 'accept: text/event-stream' 'localhost:8081/counter/count/up?to=2'", expect: [/^data: \{"n":1\}\n\ndata: \{"n":2\}\n\n\{"echo":"hi"\}\nclosed 1000\n\{"n":1\}\n\{"n":2\}\nclosed 1000\n$/] }],
  },
  {
    file: 'docs/sidecar.md',
    name: 'Publishing through the sidecar, plain and CloudEvents',
    running: ['mesh sidecar'],
    steps: [{ at: "curl -XPOST 'localhost:8081/broker?topic=orders' -H 'Timestamp: 1499951537'" }, { at: "-H 'ce-specversion: 1.0' -H 'ce-id: ord-1'" }],
  },
  {
    file: 'docs/sidecar.md',
    name: 'An app in Python behind a sidecar with mutual TLS',
    prepare: [saved('docs/sidecar.md', '# who_app.py: python3 who_app.py', 'who_app.py')],
    steps: [
      {
        at: 'python3 who_app.py &',
        ports: [9090],
        exit: 1,
        expect: [/^\{\n {2}"caller": "spiffe:\/\/mesh\.local\/svc\/mesh\.cli"\n\}\n$/],
        expectAll: [/^mesh: service go\.mesh\.srv\.who accepts mutual TLS only \(--mtls=strict\): call it with a mesh workload certificate \(400 Bad Request\)$/m],
      },
    ],
  },
  {
    file: 'docs/sidecar.md',
    name: 'The CLI through a sidecar',
    running: ['npx tsx examples/greeter-srv.ts', 'npx tsx examples/counter.ts', 'mesh sidecar'],
    steps: [{ at: 'mesh --proxy_address=127.0.0.1:8081 list services        # GET /registry', bg: ['mesh --proxy_address=127.0.0.1:8081 subscribe'] }],
  },
  {
    file: 'docs/cli.md',
    name: 'Mistakes: what the CLI prints for each',
    steps: [
      { at: "$ mesh deregister service '{\"Name\":\"a\"}' --register_ttl=2s" },
      { at: '$ mesh ap\n' },
    ],
  },
  {
    file: 'docs/cli.md',
    name: 'A full disk under the output',
    prepare: [`mesh register service '{"Name":"foo","Nodes":[{"Id":"foo-1","Address":"127.0.0.1","Port":9090}]}'`],
    steps: [{ at: '$ mesh get service foo > /dev/full' }],
  },
  {
    file: 'docs/cli.md',
    name: 'Registering by hand',
    steps: [{ at: "mesh register service --register_ttl=30s '{\"Name\":\"go.mesh.srv.foo\"" }],
    then: [{ command: 'mesh list services', expect: /^$/ }],
  },
  {
    file: 'docs/cli.md',
    name: 'Streaming calls, directly and through a sidecar',
    steps: [{ at: "mesh call --stream=server go.mesh.api.counter Count.Up '{\"to\":3}'", expect: [/^\{"n":1\}\n\{"n":2\}\n\{"n":3\}\n\{"echo":"hello"\}\n\{"echo":"world"\}\n\{"n":1\}\n\{"n":2\}\n$/] }],
  },
  {
    file: 'docs/cli.md',
    name: 'mesh check on a fresh mesh',
    // On Node.js 20 (past its end of life) the check adds its warning about that.
    steps: [{ at: '$ mesh check\nok: no problem found', ignore: { line: /^warning: node_version: /, replaces: /^ok: / } }],
  },
  {
    file: 'docs/cli.md',
    name: 'Shell completion, bash and zsh',
    steps: [{ at: 'source <(mesh completion bash)' }, { at: 'source <(mesh completion zsh)' }],
    then: [{ command: 'grep -c mesh ~/.local/share/bash-completion/completions/mesh ~/.zfunc/_mesh', expect: /completions\/mesh:[1-9]\d*\n.*_mesh:[1-9]/ }],
  },
  {
    file: 'docs/cli.md',
    name: 'mesh new service',
    steps: [
      { at: 'mesh new service hello                  # go.mesh.srv.hello in ./hello', expect: [/created go\.mesh\.srv\.hello in hello/, /created go\.mesh\.srv\.billing in billing/, /created acme\.orders in \S*src\/orders/] },
      {
        at: 'mesh new service hello --mesh=/path/to/checkout',
        replace: [['/path/to/checkout', ROOT], ['/path/to/', '$HOME/']],
        separately: true,
        expect: [/created go\.mesh\.srv\.hello in hello/],
      },
    ],
    prepare: ['touch "$HOME/mesh-platform-mesh-0.1.0.tgz"'],
    then: [{ command: 'grep -h @mesh-platform/mesh sample-*/hello/package.json', expect: new RegExp(`"@mesh-platform/mesh": "file:${ROOT}",?\\n.*"@mesh-platform/mesh": "file:/.*/mesh-platform-mesh-0\\.1\\.0\\.tgz"`) }],
  },
  {
    file: 'docs/gateway.md',
    name: 'Try it: the demo through the gateway',
    steps: [{ at: "npm start          # mesh dev: the greeter services, the gateway on :8080", bg: ['npm start'], expect: [/^\{"message":"Hello John"\}\{"msg":"Hello John"\}$/m] }],
  },
  {
    file: 'docs/gateway.md',
    name: 'The gateway on its own, as it says at start',
    steps: [
      {
        at: 'mesh api --address=127.0.0.1:9000 --handler=rpc --namespace=go.mesh.srv',
        bg: ['mesh api'],
        alternatives: true,
        shows: 'mesh api listening on http://0.0.0.0:8080 (namespace go.mesh.api, registry router, api handler fallback)\nmesh api admin',
        expectAll: [/^mesh api listening on http:\/\/127\.0\.0\.1:9000 \(namespace go\.mesh\.srv, rpc handler\)$/m],
      },
    ],
  },
  {
    file: 'docs/gateway.md',
    name: 'Admin /routes dumps the route table',
    running: ['mesh dev'],
    steps: [{ at: "curl '127.0.0.1:9901/routes?route_config_name=go.mesh.api'", expect: [/"route_config_name": "go\.mesh\.api",/, /"route_table_dump": \[/] }],
  },
  {
    file: 'docs/gateway.md',
    name: 'Streaming endpoints: Server-Sent Events with curl, WebSocket from Node.js',
    steps: [{ at: 'npx tsx examples/counter.ts &        # go.mesh.api.counter', expect: [/^data: \{"n":1\}\n\ndata: \{"n":2\}\n\ndata: \{"n":3\}\n\n/m] }],
    then: [{ command: `${saved('docs/gateway.md', "new WebSocket('ws://127.0.0.1:8080/counter/echo/chat')", 'chat.mjs')}\nnode chat.mjs`, expect: /^\{"echo":"hello"\}\n\{"echo":"world"\}\nclosed 1000 \n$/ }],
  },
  {
    file: 'README.md',
    name: 'Try it: the demo, called with mesh, curl and the admin interface',
    running: ['npm start'],
    steps: [
      {
        at: 'npx mesh list services',
        expect: [/^go\.mesh\.api\.greeter\ngo\.mesh\.srv\.greeter\n/, /"msg": "Hello John"/, /\{"message":"Hello John"\}/, /\{"msg":"Hello John"\}/, /cluster\.go\.mesh\.srv\.greeter|go\.mesh\.srv\.greeter::/, /# TYPE /],
      },
    ],
  },
  {
    file: 'docs/routing.md',
    name: 'The gateway with a route file says how many routes it read',
    prepare: [commandFrom('docs/routing.md', "cat > routes.yaml <<'EOF'")],
    steps: [{ at: 'mesh api --routes=routes.yaml\n', bg: ['mesh api'], shows: 'mesh api listening on http://0.0.0.0:8080 (namespace go.mesh.api, registry router, api handler fallback, 1 route' }],
  },
  {
    file: 'docs/routing.md',
    name: 'A canary by weight: two versions, a route file, the gateway and its stats',
    steps: [
      { at: 'VERSION=v1 npx tsx examples/greeter-version.ts &' },
      { at: "cat > routes.yaml <<'EOF'", expect: [/^\{"msg":"Hello Ann from v[12]"\}$/m] },
      {
        at: 'npx mesh get service go.mesh.srv.canary',
        expect: [
          /^service {2}go\.mesh\.srv\.canary\n\nversion v1\n\nID\tAddress\tPort\tMetadata\ngo\.mesh\.srv\.canary-\S+\t127\.0\.0\.1\t\d+\t\S+\n\nversion v2\n\nID\tAddress\tPort\tMetadata\ngo\.mesh\.srv\.canary-\S+\t127\.0\.0\.1\t\d+\t\S+\n\nEndpoint: Debug\.Health\n\nEndpoint: Say\.Hello\n$/,
        ],
      },
      {
        at: 'for i in $(seq 100); do curl -s -o /dev/null localhost:8080/hello',
        expect: [/^(go\.mesh\.srv\.canary::127\.0\.0\.1:\d+::rq_error::0\ngo\.mesh\.srv\.canary::127\.0\.0\.1:\d+::rq_total::\d+\ngo\.mesh\.srv\.canary::127\.0\.0\.1:\d+::version::v[12]\n){2}$/, /::version::v1\n/, /::version::v2\n/],
      },
      { at: "curl -s 'localhost:9901/stats?filter=^vhost'", expect: [/vhost\.\S+\.route\.hello-0\.rq_total: 10[01]/] },
    ],
  },
  {
    file: 'docs/routing.md',
    name: 'The sidecar routes outbound calls by a route file',
    running: ['VERSION=v1 npx tsx examples/greeter-version.ts', 'VERSION=v2 npx tsx examples/greeter-version.ts'],
    steps: [{ at: "cat > outbound.yaml <<'EOF'", expect: [/^(\{"msg":"Hello Ann from v2"\}){2}$/m] }],
  },
  {
    file: 'docs/gateway.md',
    name: 'HTTP/2 by prior knowledge on the gateway',
    prepare: [commandFrom('docs/routing.md', "cat > routes.yaml <<'EOF'")],
    steps: [{ at: 'mesh api --enable_http2 --routes=routes.yaml', bg: ['mesh api'], expect: [/^\{"status":"ok"\} 2$/m] }],
  },
  {
    file: 'docs/routing.md',
    name: 'Gateway documents: listeners by port and host, a certificate per SNI name, 421',
    running: ['VERSION=v1 npx tsx examples/greeter-version.ts', 'VERSION=v2 npx tsx examples/greeter-version.ts'],
    steps: [{ at: "cat > gateway.yaml <<'EOF'", shows: 'mesh api Gateway port 443 on https://127.0.0.1:8443 (edge/shop, edge/blog)' }],
  },
  {
    file: 'docs/routing.md',
    name: 'A proxy in front of two web servers: header match and canary',
    steps: [{ at: "cat > web-routes.yaml <<'EOF'", expect: [/v2\nv1\n\s+\d+ v1\n\s+\d+ v2\n$/] }],
  },
];

// ---- running ----

interface Env {
  dir: string;
  env: NodeJS.ProcessEnv;
  /** The background commands running now, of every scenario: killed if the test process ends first. */
  live: Set<Background>;
}

function makeEnv(root: string, shared: string, live: Set<Background>): Env {
  const bin = join(root, 'bin');
  const dir = join(root, 'work');
  const home = join(root, 'home');
  for (const d of [bin, dir, home]) mkdirSync(d, { recursive: true });
  for (const entry of readdirSync(ROOT)) if (entry !== '.git') symlinkSync(join(ROOT, entry), join(dir, entry));
  const realNpm = (name: string) => {
    for (const p of (process.env.PATH ?? '').split(':')) {
      try {
        readFileSync(join(p, name));
        return join(p, name);
      } catch {
        // not in this directory
      }
    }
    return name;
  };
  const shims: Record<string, string> = {
    mesh: `exec "${process.execPath}" "${CLI}" "$@"`,
    npx: [
      'case "$1" in',
      '  mesh) shift; exec mesh "$@" ;;',
      `  tsx|tsc) t=$1; shift; if [ -x "node_modules/.bin/$t" ]; then exec "node_modules/.bin/$t" "$@"; fi; exec "${ROOT}/node_modules/.bin/$t" "$@" ;;`,
      'esac',
      `exec "${realNpm('npx')}" "$@"`,
    ].join('\n'),
    npm: [
      `if [ "$(pwd -P)" = "${ROOT}" ] || [ "$(readlink package.json)" = "${join(ROOT, 'package.json')}" ]; then`,
      '  case "$*" in',
      '    start) exec mesh dev ;;',
      '    "run build"|install) exit 0 ;;',
      '  esac',
      'fi',
      `exec "${realNpm('npm')}" "$@"`,
    ].join('\n'),
    node: `exec "${process.execPath}" "$@"`,
  };
  for (const [name, body] of Object.entries(shims)) {
    writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  }
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT' && !k.startsWith('npm_') && !k.startsWith('MESH_')));
  env.PATH = `${bin}:${process.env.PATH ?? ''}`;
  env.HOME = home;
  env.MESH_HOME = join(root, 'mesh-home');
  // Shared by the scenarios: tsx keeps its compiled files there.
  env.TMPDIR = shared;
  return { dir, env, live };
}

interface Background {
  command: string;
  child: ChildProcess;
  output: () => string;
  live: Set<Background>;
}

function startBackground(command: string, at: Env, stdin = false): Background {
  const child = spawn('bash', ['-c', command], { cwd: at.dir, env: at.env, detached: true, stdio: [stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const bg = { command, child, output: () => out, live: at.live };
  at.live.add(bg);
  return bg;
}

function killGroup(bg: Background, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-bg.child.pid!, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * Ends a background command and everything it started (its process group): the scenario is over,
 * so no drain is awaited (the processes' own tests cover that). Waits until the group is gone, so
 * the next scenario finds the documented ports free.
 */
async function stopBackground(bg: Background): Promise<void> {
  killGroup(bg, 'SIGKILL');
  if (bg.child.exitCode === null && bg.child.signalCode === null) await once(bg.child, 'exit');
  // A member reparented to a PID 1 that does not reap stays a zombie: give up on it after a while.
  await waitFor(() => !killGroup(bg, 0) || undefined, 5000).catch(() => undefined);
  bg.live.delete(bg);
}

const answers = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });

/** The ports a command line names: host:port, localhost:port, `http.server PORT`. */
function portsOf(command: string): number[] {
  const ports = new Set<number>();
  for (const m of withoutComment(command).matchAll(/(?:(?:localhost|127\.0\.0\.1|0\.0\.0\.0)?:|http\.server\s+)(\d{4,5})\b/g)) ports.add(Number(m[1]));
  return [...ports];
}

/** A command that runs mesh (its CLI, a service of the examples, a service built from a doc): it says when it is ready. */
const MESH_PROCESS = /(?:^|\s)(?:mesh|npm start|\S*main\.js|\S*examples\/\S+|greeter\.js)(?:\s|$)/;

async function ready(bg: Background, ports: number[]): Promise<void> {
  const exitedEarly = () => {
    if (bg.child.exitCode !== null) throw new Error(`\`${bg.command}\` exited (${bg.child.exitCode}) before it was ready:\n${bg.output()}`);
  };
  await waitFor(async () => {
    exitedEarly();
    if (MESH_PROCESS.test(bg.command)) return /listening on|listener \S+ on|is running|subscribed to/.test(bg.output()) || undefined;
    return (await Promise.all(ports.map(answers))).every(Boolean) || undefined;
  }, 30_000).catch((err: Error) => {
    throw new Error(`${err.message}: \`${bg.command}\` not ready (ports ${ports.join(', ') || 'none'}):\n${bg.output()}`);
  });
}

/** Runs a script to its end: its exit status, its stdout, and stdout and stderr as they came. */
function runForeground(script: string, at: Env, shell = 'bash'): Promise<{ code: number | null; stdout: string; out: string }> {
  const child = spawn(shell, ['-e', '-o', 'pipefail', '-c', script], { cwd: at.dir, env: at.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let out = '';
  child.stdout.on('data', (d: Buffer) => ((stdout += d.toString()), (out += d.toString())));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return once(child, 'exit').then(([code]) => (clearTimeout(timer), { code: code as number | null, stdout, out }));
}

/** The command of a doc's block that starts with `start` (a heredoc whole): what a scenario prepares from another section. */
function commandFrom(file: string, start: string): string {
  const command = commandsOf(findBlock(file, start)).find((c) => c.startsWith(start));
  assert.ok(command, `${file}: no command starts with ${start}`);
  return command;
}

/** A command that saves a doc's code block as a file (what the doc says to save it as). */
function saved(file: string, at: string, name: string): string {
  return `cat > ${name} <<'SAMPLE_EOF'\n${findBlock(file, at).body}SAMPLE_EOF`;
}

function findBlock(file: string, at: string): Block {
  let found = blocksOf(file).filter((b) => b.body.includes(at));
  // Text that is a whole block and part of others names the whole one.
  if (found.length > 1) found = found.filter((b) => b.body.trim() === at.trim());
  assert.equal(found.length, 1, `${file}: "${at}" should be in exactly one block, found ${found.length}`);
  return found[0]!;
}

/** A session scenario: the blocks typed into one bash, one after the other. */
async function runSession(scenario: Scenario, at: Env): Promise<void> {
  const bash = startBackground('bash -s', at, true);
  try {
    let seen = 0;
    for (const [i, step] of scenario.steps.entries()) {
      const block = findBlock(scenario.file, step.at);
      const where = `${block.file}:${block.line}`;
      const mark = `__sample_step_${i}_done__`;
      const seeing = async (patterns: RegExp[]) =>
        waitFor(() => {
          if (bash.child.exitCode !== null) throw new Error(`the session's bash exited (${bash.child.exitCode})`);
          return patterns.every((re) => re.test(bash.output().slice(seen))) || undefined;
        }, 30_000).catch((err: Error) => {
          throw new Error(`${where}: ${err.message}; waiting for ${patterns.join(', ')} in:\n${bash.output().slice(seen)}`);
        });
      // Typed a command at a time: after the background ones, the reader waits for what they print.
      const commands = commandsOf(block);
      for (const [n, typed] of commands.entries()) {
        // A server the doc leaves running in its terminal runs in the background here.
        const command = step.bg?.some((b) => typed.startsWith(b)) ? `${withoutComment(typed)} &` : typed;
        bash.child.stdin!.write(`${command}\n`);
        const background = /[^&]&\s*$/.test(withoutComment(command));
        const next = commands[n + 1];
        const nextIsBackground = next !== undefined && (/[^&]&\s*$/.test(withoutComment(next)) || (step.bg?.some((b) => next.startsWith(b)) ?? false));
        if (background && !nextIsBackground && step.waitFor) await seeing(step.waitFor);
      }
      bash.child.stdin!.write(`echo; echo ${mark}\n`);
      await seeing([new RegExp(`^${mark}$`, 'm'), ...(step.waitFor ?? [])]);
      const output = bash.output().slice(seen);
      seen = bash.output().length;
      for (const re of [...(step.expect ?? []), ...(step.expectAll ?? [])]) assert.match(output, re, `${where}: output`);
    }
  } finally {
    bash.child.stdin!.end();
    await stopBackground(bash);
  }
}

async function runScenario(scenario: Scenario, root: string, shared: string, live: Set<Background>): Promise<void> {
  const at = makeEnv(root, shared, live);
  for (const command of scenario.prepare ?? []) {
    const { code, out } = await runForeground(command, at);
    assert.equal(code, 0, `${command}: ${out}`);
  }
  if (scenario.session) return runSession(scenario, at);
  const background: Background[] = [];
  const startAndWait = async (command: string, ports: number[]) => {
    const bg = startBackground(command, at);
    background.push(bg);
    await ready(bg, ports);
    return bg.output();
  };
  try {
    await Promise.all((scenario.running ?? []).map((r) => (typeof r === 'string' ? startAndWait(r, portsOf(r)) : startAndWait(r.command, r.ports))));
    for (const step of scenario.steps) {
      const block = findBlock(scenario.file, step.at);
      const where = `${block.file}:${block.line}`;
      if (!isShell(block)) throw new Error(`${where}: not a shell block`);
      const transcript = block.lang === '' || block.lang === 'console';
      if (transcript) {
        const lines = block.body.split('\n');
        for (let i = 0; i < lines.length; i++) {
          if (!lines[i]!.startsWith('$ ')) continue;
          const shown: string[] = [];
          for (let j = i + 1; j < lines.length && !lines[j]!.startsWith('$ '); j++) shown.push(lines[j]!);
          const { out } = await runForeground(lines[i]!.slice(2), at);
          const printed = out.split('\n').filter((l) => !step.ignore?.line.test(l));
          const replaced = printed.length < out.split('\n').length;
          const expected = shown.filter((l) => !(replaced && step.ignore?.replaces?.test(l)));
          assert.equal(printed.join('\n').trimEnd(), expected.join('\n').trimEnd(), `${where}: ${lines[i]}`);
        }
        continue;
      }
      let foreground: string[] = [];
      let output = '';
      let shown = '';
      const shell = block.lang === 'zsh' ? 'zsh' : 'bash';
      const flush = async () => {
        if (foreground.length === 0) return;
        const scripts = step.separately ? foreground.map((c, n) => `mkdir -p sample-${n} && cd sample-${n}\n${c}`) : [foreground.join('\n')];
        foreground = [];
        for (const script of scripts) {
          const { code, stdout, out } = await runForeground(script, at, shell);
          output += stdout;
          shown += out;
          assert.equal(code, step.exit ?? 0, `${where}: exit status ${code}, output:\n${out}`);
        }
      };
      for (const written of commandsOf(block)) {
        const command = (step.replace ?? []).reduce((c, [from, to]) => c.replaceAll(from, to), written);
        const code = withoutComment(command);
        const trailingAmp = /[^&]&\s*$/.test(code);
        if (trailingAmp || step.bg?.some((b) => code.startsWith(b))) {
          await flush();
          const text = trailingAmp ? code.replace(/&\s*$/, '') : code;
          shown += await startAndWait(text, [...portsOf(text), ...(step.ports ?? [])]);
          if (step.alternatives) await stopBackground(background.pop()!);
        } else foreground.push(command);
      }
      await flush();
      for (const re of step.expect ?? []) assert.match(output, re, `${where}: stdout; all output:\n${shown}`);
      for (const re of step.expectAll ?? []) assert.match(shown, re, `${where}: output`);
      if (step.shows) {
        const block = findBlock(scenario.file, step.shows);
        const lines = new Set(shown.replace(/\r/g, '').split('\n'));
        for (const line of block.body.trimEnd().split('\n')) {
          if (line.trim() !== '...') assert.ok(lines.has(line), `${block.file}:${block.line}: "${line}" not in the output of ${where}:\n${shown}`);
        }
      }
    }
    for (const { command, expect } of scenario.then ?? []) {
      const { code, stdout, out } = await runForeground(command, at);
      assert.equal(code, 0, `${command}: ${out}`);
      assert.match(stdout, expect, `${command}: ${out}`);
    }
  } finally {
    await Promise.all(background.map(stopBackground));
  }
}

// ---- the tests ----

describe('docs samples', () => {
  const tmp = tempDir('mesh-docs-samples-');
  const shared = join(tmp.path, 'tmp');
  mkdirSync(shared);
  // A scenario's servers hold the documented ports: if this process ends before it stops them (a
  // timeout, Ctrl-C), they go with it rather than fail the next tests that need those ports.
  const live = new Set<Background>();
  const killAll = () => {
    for (const bg of live) killGroup(bg, 'SIGKILL');
  };
  process.once('exit', killAll);
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      killAll();
      process.exit(1);
    });
  }
  after(() => tmp.cleanup());

  it('every shell block of the covered files that starts a process or calls the mesh is run by a test or says why not', () => {
    const run = new Set<string>();
    for (const s of SCENARIOS) for (const step of s.steps) {
      const b = findBlock(s.file, step.at);
      run.add(`${b.file}:${b.line}`);
    }
    for (const e of ELSEWHERE) {
      const found = e.every ? blocksOf(e.file).filter((b) => b.body.includes(e.at)) : [findBlock(e.file, e.at)];
      assert.ok(found.length > 0, `${e.file}: no block has "${e.at}"`);
      assert.ok(readFileSync(join(ROOT, e.by), 'utf8').includes(e.file), `${e.by} should mention ${e.file}`);
      for (const b of found) run.add(`${b.file}:${b.line}`);
    }
    const missing: string[] = [];
    for (const file of COVERED) {
      for (const b of blocksOf(file)) {
        if (!startsProcess(b) || b.marked || run.has(`${b.file}:${b.line}`)) continue;
        missing.push(`${b.file}:${b.line}: ${b.body.split('\n')[0]}`);
      }
    }
    assert.deepEqual(missing, [], `blocks neither run by a test nor marked <!-- sample: not run: REASON -->:\n${missing.join('\n')}`);
  });

  it('config blocks load with the real loaders', async () => {
    const { parseRouteFile } = (await import(join(ROOT, 'dist/src/edge/routes/file.js'))) as { parseRouteFile: (text: string, file: string) => unknown };
    const { parseProxyConfig } = (await import(join(ROOT, 'dist/src/fronts/proxy/config.js'))) as { parseProxyConfig: (text: string, file: string) => unknown };
    let checked = 0;
    for (const file of COVERED) {
      for (const b of blocksOf(file)) {
        if (b.lang !== 'yaml' || b.marked) continue;
        const where = `${b.file}:${b.line}`;
        if (/^kind: (HTTPRoute|GRPCRoute)/m.test(b.body)) assert.doesNotThrow(() => parseRouteFile(b.body, where), where);
        else if (/^listeners:/m.test(b.body)) assert.doesNotThrow(() => parseProxyConfig(b.body, where), where);
        else continue;
        checked++;
      }
    }
    assert.ok(checked > 0);
  });

  for (const [i, scenario] of SCENARIOS.entries()) {
    it(`${scenario.file}: ${scenario.name}`, { timeout: 120_000 }, async () => {
      await runScenario(scenario, join(tmp.path, String(i)), shared, live);
    });
  }
});
