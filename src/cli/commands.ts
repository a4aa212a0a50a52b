/** The platform commands: list, get, register, deregister, call, publish, subscribe, dlq, health. */
import type { Config } from './flags.js';
import { FlagError } from './flags.js';
import { DirectOperations, SidecarOperations, type Operations } from './operations.js';
import { parseJson, stringifyJson, JsonSyntaxError } from '../base/codec/json.js';
import { serviceFromInput } from '../engines/registry/input.js';
import { mergeVersions, type Service } from '../engines/registry/registry.js';
import { RegistryValidationError } from '../engines/registry/validate.js';
import { ERROR_IDS, MeshError, notFound, serviceNotFound } from '../base/errors.js';
import { printable } from '../base/util/text.js';
import { formatAddress } from '../base/util/address.js';
import { messageId } from '../engines/broker/durable.js';
import { endpointNameProblem } from '../core/transport/endpoint.js';

export interface Output {
  out: (text: string) => void;
  err: (text: string) => void;
  /** Resolves when `out` can take more (see src/cli/output.ts). */
  drain?: () => Promise<void>;
}

/** A usage problem in a command's arguments (exit 2). */
export class UsageError extends FlagError {}

export function operationsFor(config: Config): Operations {
  if (config.proxy_address) return new SidecarOperations(config.proxy_address, config.client_request_timeout, config.sidecar_token);
  return new DirectOperations(config);
}

function parseServiceArg(args: string[], what: string): Service {
  const text = args.join(' ').trim();
  if (!text) throw new UsageError(`${what} needs the service as JSON, e.g. '{"Name":"foo","Nodes":[{"Id":"foo-1","Address":"127.0.0.1","Port":9090}]}'`);
  let parsed: unknown;
  try {
    parsed = parseJson(text);
  } catch (err) {
    throw new UsageError(`${what}: the service is not valid JSON: ${(err as Error).message}`);
  }
  try {
    return serviceFromInput(parsed);
  } catch (err) {
    if (err instanceof RegistryValidationError) throw new UsageError(`${what}: ${err.message}`);
    throw err;
  }
}

/**
 * The text form of `mesh get service`: the name, then per registry Version (in the order given,
 * by version) its `version` line and its own nodes, then the endpoints of every version (each name
 * once). Every registry string goes through printable (no raw control characters).
 */
export function formatService(versions: readonly Service[]): string {
  const p = printable;
  const lines = [`service  ${p(versions[0]?.name ?? '')}`, ''];
  const endpoints: Service['endpoints'] = [];
  for (const [i, service] of versions.entries()) {
    if (i > 0) lines.push('');
    if (service.version) lines.push(`version ${p(service.version)}`, '');
    lines.push('ID\tAddress\tPort\tMetadata');
    for (const n of service.nodes) {
      const meta = Object.entries(n.metadata ?? {})
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([k, v]) => `${p(k)}=${p(v)}`)
        .join(',');
      lines.push(`${p(n.id)}\t${p(n.address)}\t${n.port}\t${meta}`);
    }
    for (const e of service.endpoints ?? []) if (!endpoints.some((x) => x.name === e.name)) endpoints.push(e);
  }
  for (const e of endpoints) {
    lines.push('', `Endpoint: ${p(e.name)}`);
    const meta = Object.entries(e.metadata ?? {}).map(([k, v]) => `${p(k)}=${p(v)}`);
    if (meta.length) lines.push(`Metadata: ${meta.join(',')}`);
  }
  return lines.join('\n') + '\n';
}

function pretty(text: string): string {
  try {
    return stringifyJsonIndented(parseJson(text));
  } catch {
    return text;
  }
}

function stringifyJsonIndented(value: unknown): string {
  return JSON.stringify(JSON.parse(stringifyJson(value)), null, 2);
}

/** Runs one platform command; resolves with the exit code. */
export async function runPlatformCommand(positionals: string[], config: Config, io: Output, given?: ReadonlySet<string>): Promise<number> {
  const [verb, noun, ...rest] = positionals;
  const json = config.output === 'json';
  const ops = operationsFor(config);
  try {
    switch (verb) {
      case 'list': {
        if (noun !== 'services') throw new UsageError('usage: mesh list services');
        const names = await ops.listServices();
        io.out(json ? JSON.stringify(names.map((name) => ({ name }))) + '\n' : names.map((n) => printable(n) + '\n').join(''));
        return 0;
      }
      case 'get': {
        const name = rest[0];
        if (noun !== 'service' || !name) throw new UsageError('usage: mesh get service NAME');
        const versions = await ops.getServiceVersions(name);
        const service = mergeVersions(versions);
        if (!service) throw serviceNotFound(ERROR_IDS.cli, name);
        io.out(json ? JSON.stringify(service) + '\n' : formatService(versions));
        return 0;
      }
      case 'register':
      case 'deregister': {
        if (noun !== 'service') throw new UsageError(`usage: mesh ${verb} service JSON`);
        const service = parseServiceArg(rest, `${verb} service`);
        // --register_ttl (or MESH_REGISTER_TTL) given: the nodes expire unless registered again; else they stay until deregistered.
        if (verb === 'register') await ops.register(service, given?.has('register_ttl') ? config.register_ttl : undefined);
        else await ops.deregister(service);
        io.out(json ? '{"status":"ok"}\n' : 'ok\n');
        return 0;
      }
      case 'call': {
        const [service, endpoint, ...body] = [noun, ...rest];
        if (!service || !endpoint) throw new UsageError("usage: mesh call SERVICE Endpoint.Method ['{json}']");
        const badEndpoint = endpointNameProblem(endpoint);
        if (badEndpoint) throw new UsageError(`call: ${badEndpoint}`);
        const requestJson = body.join(' ').trim() || '{}';
        try {
          parseJson(requestJson);
        } catch (err) {
          throw new UsageError(`call: the request is not valid JSON: ${(err as JsonSyntaxError).message}`);
        }
        if (config.stream) {
          const { runStreamCall } = await import('./call-stream.js');
          if (config.stream !== 'server' && body.length > 0) throw new UsageError(`call --stream=${config.stream}: the requests are read from stdin, one JSON a line; give no JSON argument`);
          return await runStreamCall(ops, {
            service,
            endpoint,
            kind: config.stream,
            requestJson,
            // The unary budget's default does not apply to a stream: only an explicit --client_request_timeout is its deadline.
            timeoutMs: given?.has('client_request_timeout') ? config.client_request_timeout : undefined,
            input: process.stdin,
            maxLineBytes: config.max_body_size,
            out: io.out,
            drain: io.drain,
          });
        }
        const response = await ops.call(service, endpoint, requestJson);
        io.out((json ? response : pretty(response)) + '\n');
        return 0;
      }
      case 'publish': {
        const topic = noun;
        if (!topic || rest.length === 0) throw new UsageError('usage: mesh publish TOPIC MESSAGE');
        await ops.publish(topic, Buffer.from(rest.join(' ')), { 'content-type': 'text/plain', timestamp: String(Math.floor(Date.now() / 1000)) });
        io.out(json ? '{"status":"ok"}\n' : 'ok\n');
        return 0;
      }
      case 'subscribe': {
        const topic = noun;
        if (!topic) throw new UsageError('usage: mesh subscribe TOPIC [--queue Q] [--ack --durable NAME]');
        if (config.ack && !config.durable) throw new UsageError('subscribe --ack needs --durable NAME (the consumer the broker keeps messages for)');
        if (!config.ack && config.durable) throw new UsageError('subscribe --durable needs --ack');
        let ended: string | undefined;
        let wake = () => {};
        const stop = await ops.subscribe(
          topic,
          config.queue,
          (m) => {
            if (json) io.out(JSON.stringify({ header: m.header, body: m.body.toString('base64') }) + '\n');
            else io.out(m.body.toString('utf8') + '\n');
          },
          (reason) => {
            ended = reason;
            wake();
          },
          config.ack ? config.durable : undefined,
        );
        io.err(`subscribed to ${topic}${config.queue ? ` (queue ${config.queue})` : ''}${config.ack ? ` (durable ${config.durable}, acknowledged)` : ''}; Ctrl-C to stop\n`);
        await new Promise<void>((resolve) => {
          wake = resolve;
          process.once('SIGINT', resolve);
          process.once('SIGTERM', resolve);
        });
        await stop();
        if (ended) {
          io.err(`subscription to ${topic} ended: ${ended}\n`);
          return 1;
        }
        return 0;
      }
      case 'dlq': {
        const topic = rest[0];
        if ((noun !== 'list' && noun !== 'replay') || !topic || rest.length > 1) throw new UsageError('usage: mesh dlq list|replay TOPIC');
        if (noun === 'replay') {
          const n = await ops.replayDeadLetters(topic);
          io.out(json ? JSON.stringify({ replayed: n }) + '\n' : `replayed ${n}\n`);
          return 0;
        }
        const dead = await ops.listDeadLetters(topic);
        if (json) io.out(JSON.stringify(dead.map((m) => ({ id: messageId(m.header), header: m.header, body: m.body.toString('base64') }))) + '\n');
        else {
          const rows = dead.map((m) =>
            [messageId(m.header) ?? '', m.header['Mesh-Dlq-Consumer'] ?? '', m.header['Mesh-Dlq-Deliveries'] ?? '', m.header['Mesh-Dlq-Error'] ?? '', m.body.toString('utf8')].map(printable).join('\t'),
          );
          io.out(['id\tconsumer\tdeliveries\terror\tbody', ...rows].join('\n') + '\n');
        }
        return 0;
      }
      case 'consumers': {
        const topic = rest[0];
        if (noun === 'list' && topic && rest.length === 1) {
          const consumers = await ops.listConsumers(topic);
          if (json) io.out(JSON.stringify(consumers.map((c) => ({ name: c.name, pending: c.pending, lastActive: new Date(c.lastActive).toISOString() }))) + '\n');
          else io.out(['name\tpending\tlast_active', ...consumers.map((c) => `${c.name}\t${c.pending}\t${new Date(c.lastActive).toISOString()}`)].join('\n') + '\n');
          return 0;
        }
        if (noun === 'rm' && topic && rest.length === 2) {
          const name = rest[1]!;
          if (!(await ops.removeConsumer(topic, name))) throw notFound(ERROR_IDS.cli, `consumer ${name} of topic ${topic}: not found`);
          io.out(json ? JSON.stringify({ removed: name }) + '\n' : `removed ${name}\n`);
          return 0;
        }
        throw new UsageError('usage: mesh consumers list TOPIC | mesh consumers rm TOPIC NAME');
      }
      case 'health': {
        const name = noun;
        if (!name) throw new UsageError('usage: mesh health SERVICE');
        const service = await ops.getService(name);
        if (!service) throw serviceNotFound(ERROR_IDS.cli, name);
        const rows: Array<{ node: string; address: string; status: string }> = [];
        for (const node of service.nodes) {
          const address = formatAddress(node.address, node.port);
          let status: string;
          try {
            const text = await ops.call(name, 'Debug.Health', '{}', address);
            status = (parseJson(text) as { status?: string }).status ?? 'ok';
          } catch (err) {
            status = `error: ${err instanceof MeshError ? err.detail : (err as Error).message}`;
          }
          rows.push({ node: node.id, address, status });
        }
        if (json) io.out(JSON.stringify(rows) + '\n');
        else io.out(['node\taddress\tstatus', ...rows.map((r) => `${r.node}\t${r.address}\t${r.status}`)].join('\n') + '\n');
        return rows.every((r) => r.status === 'ok') ? 0 : 1;
      }
      default:
        throw new UsageError(`unknown command "${positionals.join(' ')}" (see mesh --help)`);
    }
  } finally {
    await ops.close();
  }
}
