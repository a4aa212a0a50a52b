/** Property tests: command-line flags (src/cli/flags.ts parseArgs): ParsedArgs or a FlagError. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { FLAG_SPECS, FlagError, parseArgs } from '../../src/cli/flags.js';

const names = Object.keys(FLAG_SPECS);
const flagName = fc.oneof(fc.constantFrom(...names), fc.constantFrom(...names).map((n) => n.replace(/_/g, '-')), fc.stringMatching(/^[a-z_-]{1,12}$/), fc.constantFrom('help', 'h', 'version', 'hot-restart-version'));
const flagValue = fc.oneof(fc.string({ maxLength: 10 }), fc.constantFrom('true', 'false', '0', '5s', '-1', '4MiB', 'info', 'debug', 'rpc', 'proxy', '127.0.0.1:0', 'a,b', '', '1e3'));
const arg = fc.oneof(
  fc.tuple(flagName, flagValue).map(([n, v]) => `--${n}=${v}`),
  flagName.map((n) => `--${n}`),
  flagValue,
  fc.constantFrom('--', '-c', '-', '---', '--=x', 'api', 'sidecar'),
  fc.string({ maxLength: 12 }),
);

describe('fuzz: flags', () => {
  it('random argv: ParsedArgs with every flag converted, or a FlagError (exit 2) with a message', () => {
    fc.assert(
      fc.property(fc.array(arg, { maxLength: 8 }), (argv) => {
        let parsed: ReturnType<typeof parseArgs>;
        try {
          parsed = parseArgs(argv, {});
        } catch (err) {
          assert.ok(err instanceof FlagError, `${(err as Error).constructor.name}: ${(err as Error).stack}`);
          assert.equal(err.exitCode, 2);
          assert.ok(err.message.length > 0);
          return;
        }
        for (const name of parsed.given) assert.ok(Object.hasOwn(FLAG_SPECS, name), `given --${name} is not a flag`);
        for (const p of parsed.positionals) assert.equal(typeof p, 'string');
      }),
      { numRuns: 4000 },
    );
  });

  it('random environment values: the same contract', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom(...names).map((n) => `MESH_${n.toUpperCase()}`), flagValue, { maxKeys: 4 }), (env) => {
        try {
          parseArgs([], env);
        } catch (err) {
          assert.ok(err instanceof FlagError, String(err));
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('flags: names of Object.prototype members', () => {
  it('are unknown flags', () => {
    for (const a of ['--constructor=1', '--__proto__=x', '--hasOwnProperty=1', '--toString=x']) assert.throws(() => parseArgs([a], {}), FlagError, a);
    // Bare words are positionals, whatever Object.prototype has under that name (a short-flag table once took valueOf for -f).
    for (const a of ['valueOf', 'toString', 'constructor', '__proto__']) assert.deepEqual(parseArgs([a, ''], {}).positionals, [a, ''], a);
  });
});
