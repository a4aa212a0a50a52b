/**
 * The http broker's delivery secret: every delivery carries it (`Mesh-Broker-Secret`), and the
 * delivery endpoint refuses one without it (401) or with another (403), so only processes of the
 * mesh can deliver messages, not any user of the machine who reads a `topic:` node.
 *
 * Where it comes from, first found:
 * 1. `secret` (--broker_secret, MESH_BROKER_SECRET): the secret itself;
 * 2. `secretFile` (--broker_secret_file): a file holding it (one line);
 * 3. `broker.secret` in the state directory (the local registry's directory, else $MESH_HOME or
 *    ~/.mesh), made by the first process that needs it: 32 random bytes, base64url, mode 0600,
 *    created whole (written to a temporary file, then linked to the name, so two processes
 *    starting at once agree on the one that was linked first);
 * 4. without a directory (an in-process registry): a secret of this process, as only its own
 *    brokers can see its subscriptions.
 * A secret is 16 to 1024 printable ASCII characters without spaces (it travels as a header).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { closeSync, linkSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type pino from 'pino';
import { PRIVATE_FILE_MODE, privateDirectory, privateFiles } from '../../../base/util/private-files.js';

/** The request header that carries the secret (and its lower-case form, as node reads headers). */
export const SECRET_HEADER = 'Mesh-Broker-Secret';
export const SECRET_FIELD = 'mesh-broker-secret';
/** Its file in the state directory. */
export const SECRET_FILE = 'broker.secret';
const MIN_LENGTH = 16;
const MAX_LENGTH = 1024;
const CREATE_ATTEMPTS = 5;

/** The secret of brokers with no state directory: theirs alone, for the life of the process. */
const PROCESS_SECRET = randomBytes(32).toString('base64url');

export interface SecretSource {
  /** The secret itself. */
  secret?: string;
  /** A file holding the secret. */
  secretFile?: string;
  /** The state directory whose `broker.secret` is used (and made when missing). */
  directory?: string;
  logger?: pino.Logger;
}

/** Why a secret is not usable, or undefined; never quotes it. */
export function secretProblem(secret: string): string | undefined {
  if (secret.length < MIN_LENGTH) return `must be at least ${MIN_LENGTH} characters`;
  if (secret.length > MAX_LENGTH) return `must be at most ${MAX_LENGTH} characters`;
  if (!/^[\x21-\x7e]+$/.test(secret)) return 'must be printable ASCII without spaces';
  return undefined;
}

/** The delivery secret from the first source given (see the top of this file). Throws a clear error. */
export function loadSecret(source: SecretSource): DeliverySecret {
  if (source.secret !== undefined) {
    const problem = secretProblem(source.secret);
    if (problem) throw new Error(`broker secret: ${problem}`);
    return new DeliverySecret(source.secret);
  }
  if (source.secretFile !== undefined) {
    const secret = readSecretFile(source.secretFile);
    // The operator's own file: reported, not changed.
    const st = statSync(source.secretFile, { throwIfNoEntry: false });
    if (st && (st.mode & 0o077) !== 0) source.logger?.warn({ path: source.secretFile, mode: `0${(st.mode & 0o777).toString(8)}` }, 'broker secret file is open to other users: they can forge deliveries (chmod 600 it)');
    return new DeliverySecret(secret);
  }
  if (source.directory !== undefined) return new DeliverySecret(directorySecret(source.directory, source.logger));
  return new DeliverySecret(PROCESS_SECRET);
}

/** The secret and its check: compared as SHA-256 digests in constant time. */
export class DeliverySecret {
  private readonly digest: Buffer;

  constructor(readonly value: string) {
    this.digest = createHash('sha256').update(value).digest();
  }

  /** 'missing' without a value, 'wrong' for another secret (or the header given twice), else 'ok'. */
  check(given: string | string[] | undefined): 'ok' | 'missing' | 'wrong' {
    if (given === undefined) return 'missing';
    if (Array.isArray(given)) return 'wrong';
    const digest = createHash('sha256').update(given).digest();
    return timingSafeEqual(digest, this.digest) ? 'ok' : 'wrong';
  }
}

function readSecretFile(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new Error(`broker secret file ${file}: cannot read: ${(err as Error).message}`);
  }
  const secret = text.replace(/\r?\n$/, '');
  const problem = secretProblem(secret);
  if (problem) throw new Error(`broker secret file ${file}: the secret (one line) ${problem}`);
  return secret;
}

/** `broker.secret` of the directory: read, or made whole when missing (several processes may race). */
function directorySecret(directory: string, logger: pino.Logger | undefined): string {
  const file = join(directory, SECRET_FILE);
  for (let attempt = 1; ; attempt++) {
    if (statSync(file, { throwIfNoEntry: false })) {
      privateFiles([file], logger);
      return readSecretFile(file);
    }
    privateDirectory(directory, logger);
    const tmp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    const fd = openSync(tmp, 'wx', PRIVATE_FILE_MODE);
    try {
      writeSync(fd, `${randomBytes(32).toString('base64url')}\n`);
    } finally {
      closeSync(fd);
    }
    try {
      linkSync(tmp, file); // fails with EEXIST when another process linked its own first
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= CREATE_ATTEMPTS) {
        throw new Error(`broker secret file ${file}: cannot create: ${(err as Error).message}`);
      }
    } finally {
      unlinkSync(tmp);
    }
  }
}
