/**
 * SchemaOptionError: a bad option value found below the front ends. It carries the option's schema key
 * (`client_request_timeout`) and names other options in its reason as `{key}`; the front end
 * prints them its own way: the CLI as flags (`--client_request_timeout`), the library as API
 * option names (`clientRequestTimeout`, the default message).
 */
import { redactUrl } from './redact.js';

export type OptionStyle = 'flag' | 'api';

/** An option's name in a style: `--client_request_timeout` or `clientRequestTimeout`. */
export function optionLabel(key: string, style: OptionStyle): string {
  return style === 'flag' ? `--${key}` : key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

export class SchemaOptionError extends Error {
  /**
   * `key`: the option's schema key. `reason`: what is wrong, `{other_key}` naming another option.
   * `value`: the value refused (null: refused but not shown; undefined: the reason says it all,
   * naming the option itself as `{key}`).
   */
  constructor(
    readonly key: string,
    readonly reason: string,
    readonly value?: string | null,
  ) {
    super('');
    this.name = 'SchemaOptionError';
    this.message = this.format('api');
  }

  /** The reason alone, with the options it names (`{key}`) written in a style. */
  reasonIn(style: OptionStyle): string {
    return this.reason.replace(/\{([a-z0-9_]+)\}/g, (_, k: string) => optionLabel(k, style));
  }

  /** The message with options named as flags (the CLI) or as API options (the library). */
  format(style: OptionStyle): string {
    const reason = this.reasonIn(style);
    const name = optionLabel(this.key, style);
    if (this.value === undefined) return reason;
    const shown = this.value === null ? '' : `"${redactUrl(this.value)}"`;
    if (style === 'flag') return `invalid value ${shown}${shown ? ' ' : ''}for flag ${name}: ${reason}`;
    return `invalid option ${name}: ${reason}${shown ? ` (got ${shown})` : ''}`;
  }
}

/** An error's message as a front end prints it: a SchemaOptionError in its style, any other as it is. */
export function errorMessage(err: unknown, style: OptionStyle): string {
  return err instanceof SchemaOptionError ? err.format(style) : (err as Error)?.message ?? String(err);
}
