/**
 * `mesh check`: the broker. nats: it connects; http: the delivery secret file given with
 * --broker_secret_file can be read (the secret in the state directory is covered by the file check).
 */
import { readFileSync, statSync } from 'node:fs';
import type { DirectOperations } from '../operations.js';
import { errorOf, within, type Finding } from './finding.js';

/** `secretFile`: --broker_secret_file (the runtime of `ops` is built without it, so that the other checks run when it cannot be read). */
export async function checkBroker(ops: DirectOperations, secretFile: string | undefined, timeoutMs: number): Promise<Finding[]> {
  const o = ops.runtime.options;
  if (o.broker === 'nats') {
    try {
      await within(ops.runtime.broker.connect(), timeoutMs);
    } catch (err) {
      const e = errorOf(err); // the nats broker's errors name it and its address
      return [{ level: 'error', check: 'broker', message: e.startsWith('nats ') ? e : `nats ${o.brokerAddress ?? ''}: ${e}` }];
    }
    return [];
  }
  if (o.broker === 'http' && secretFile !== undefined) {
    const file = secretFile;
    try {
      readFileSync(file);
    } catch (err) {
      return [{ level: 'error', check: 'broker', message: `--broker_secret_file ${file} cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }];
    }
    const mode = statSync(file).mode;
    if ((mode & 0o077) !== 0) return [{ level: 'warning', check: 'broker', message: `--broker_secret_file ${file} is 0${(mode & 0o777).toString(8)}, open to other users: chmod 600 ${file}` }];
  }
  return [];
}
