/**
 * API keys (`--auth=key --auth_keys=FILE`, docs/security.md). Only SHA-256 hashes are kept in
 * memory; a presented key is hashed and compared with every stored hash in constant time
 * (crypto.timingSafeEqual), the loop never stopping early. The file holds plaintext keys or
 * `sha256:<64 hex>` hashes, so plaintext need not sit on disk.
 *
 * Formats: `.yaml`/`.yml`/`.json` → a list of {key, subject, scopes}, or a mapping
 * key → {subject, scopes}; any other name → lines of `KEY [SUBJECT [SCOPE,SCOPE...]]`, `#` comments.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Node } from 'yaml';
import { isMap, isSeq } from '../../base/util/lazy-packages.js';
import { parseConfig } from '../../base/config/reader.js';
import { RULES_ERRORS, RulesError } from './rule-file.js';

export interface Identity {
  subject: string;
  scopes: string[];
}

interface KeyEntry extends Identity {
  hash: Buffer;
}

const MAX_KEYS = 100_000;
/** Plaintext keys shorter than this are refused: a guessable key is no key. */
export const MIN_KEY_LENGTH = 16;

export function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

export class KeyStore {
  private constructor(private readonly entries: KeyEntry[]) {}

  get size(): number {
    return this.entries.length;
  }

  /** The identity of a presented key, or undefined. Constant time in the key (all hashes compared). */
  lookup(presented: string): Identity | undefined {
    const hash = sha256(presented);
    let found: KeyEntry | undefined;
    for (const e of this.entries) {
      if (timingSafeEqual(e.hash, hash) && !found) found = e;
    }
    return found ? { subject: found.subject, scopes: found.scopes } : undefined;
  }

  /** Parses a key file; throws a RulesError naming the line. */
  static parse(text: string, fileName: string): KeyStore {
    const entries: KeyEntry[] = [];
    const seen = new Set<string>();
    const add = (line: number, key: unknown, subject: unknown, scopes: unknown) => {
      if (typeof key !== 'string' || key === '') throw new RulesError(line, 'key: must be a non-empty string');
      let hash: Buffer;
      const m = /^sha256:(.*)$/i.exec(key);
      if (m) {
        if (!/^[0-9a-fA-F]{64}$/.test(m[1]!)) throw new RulesError(line, 'sha256: must be followed by 64 hex digits');
        hash = Buffer.from(m[1]!, 'hex');
      } else {
        if (key.length < MIN_KEY_LENGTH) throw new RulesError(line, `key shorter than ${MIN_KEY_LENGTH} characters`);
        hash = sha256(key);
      }
      const hex = hash.toString('hex');
      if (seen.has(hex)) throw new RulesError(line, 'the same key is listed twice');
      seen.add(hex);
      if (subject !== undefined && subject !== null && (typeof subject !== 'string' || subject === '')) throw new RulesError(line, 'subject: must be a non-empty string');
      let list: string[] = [];
      if (scopes !== undefined && scopes !== null) {
        if (!Array.isArray(scopes) || !scopes.every((s) => typeof s === 'string' && s !== '' && !/\s/.test(s))) throw new RulesError(line, 'scopes: must be a list of scope names');
        list = scopes as string[];
      }
      if (entries.length >= MAX_KEYS) throw new RulesError(line, `more than ${MAX_KEYS} keys`);
      // Without a subject the key is known by the start of its hash (never by the key).
      entries.push({ hash, subject: (subject as string | undefined) ?? `key-${hex.slice(0, 12)}`, scopes: list });
    };
    if (/\.(ya?ml|json)$/i.test(fileName)) {
      const doc = parseConfig(text, { file: fileName, style: RULES_ERRORS });
      const lineAt = (node: unknown) => doc.lineOf(node) ?? 1;
      const root = doc.contents;
      if (isSeq(root)) {
        for (const item of root.items) {
          if (!isMap(item)) throw new RulesError(lineAt(item), 'each entry must be a mapping {key, subject, scopes}');
          const o = doc.toJS(item) as Record<string, unknown>;
          for (const k of Object.keys(o)) if (!['key', 'subject', 'scopes'].includes(k)) throw new RulesError(lineAt(item), `unknown field "${k}" (use key, subject, scopes)`);
          add(lineAt(item), o.key, o.subject, o.scopes);
        }
      } else if (isMap(root)) {
        for (const pair of root.items) {
          const key = (pair.key as { value?: unknown })?.value;
          const value = pair.value === null || pair.value === undefined ? null : (doc.toJS(pair.value as Node) ?? null);
          if (value !== null && (typeof value !== 'object' || Array.isArray(value))) throw new RulesError(lineAt(pair.key), 'the value of a key must be {subject, scopes}');
          const o = (value ?? {}) as Record<string, unknown>;
          for (const k of Object.keys(o)) if (!['subject', 'scopes'].includes(k)) throw new RulesError(lineAt(pair.key), `unknown field "${k}" (use subject, scopes)`);
          add(lineAt(pair.key), typeof key === 'number' ? String(key) : key, o.subject, o.scopes);
        }
      } else if (root !== null && root !== undefined) {
        throw new RulesError(lineAt(root), 'must be a list of {key, subject, scopes} or a mapping key → {subject, scopes}');
      }
    } else {
      text.split('\n').forEach((raw, i) => {
        const line = raw.trim();
        if (line === '' || line.startsWith('#')) return;
        const [key, subject, scopes, extra] = line.split(/\s+/);
        if (extra !== undefined) throw new RulesError(i + 1, 'a line is KEY [SUBJECT [SCOPE,SCOPE...]]');
        add(i + 1, key, subject, scopes === undefined ? undefined : scopes.split(',').filter((s) => s !== ''));
      });
    }
    if (entries.length === 0) throw new RulesError(undefined, 'no keys');
    return new KeyStore(entries);
  }
}
