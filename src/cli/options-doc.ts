/**
 * The flag tables of docs/ generated from the option schema (`npm run docs:options`): a table
 * sits between `<!-- options:begin group=GROUP -->` (or `api` for the library's options) and
 * `<!-- options:end -->`, and test/project/options-docs.test.ts fails when one is out of date.
 */
import { OPTION_GROUPS, apiName, commandDefaultsText, envName, optionEntries, type OptionGroup, type OptionSpec } from '../base/options/schema.js';

const BEGIN = /<!-- options:begin (group=([a-z]+)|api) -->\n[\s\S]*?<!-- options:end -->/g;

/** A table cell: pipes escaped, no line breaks. */
const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
const code = (s: string) => (s.includes('`') ? `\`\` ${s} \`\`` : `\`${s}\``);

function valueText(spec: OptionSpec): string {
  if (spec.type === 'bool') return 'bool';
  if (spec.choices) return spec.choices.map(code).join(' \\| ');
  return spec.type;
}

function defaultText(d: string | number | null | undefined): string {
  return d === undefined || d === null ? '' : code(String(d));
}

/** The table of one help group: every flag of it, with its variable, value, default and commands. */
export function groupTable(group: OptionGroup): string {
  const rows = optionEntries()
    .filter(([, spec]) => spec.group === group)
    .map(([key, spec]) => `| \`--${key}\` | \`${envName(key)}\` | ${valueText(spec)} | ${defaultText(spec.default)}${spec.commandDefaults ? ` (${cell(commandDefaultsText(spec, code))})` : ''} | ${spec.commands.join(', ')} | ${cell(spec.help)} |`);
  return ['| Flag | Variable | Value | Default | Commands | What |', '|---|---|---|---|---|---|', ...rows].join('\n');
}

/** The table of the library's options (MeshOptions): each one's flag and default. */
export function apiTable(): string {
  const rows = optionEntries()
    .filter(([, spec]) => spec.api)
    .map(([key, spec]) => `| \`${apiName(key)}\` | \`--${key}\` | ${valueText(spec)} | ${defaultText(spec.apiDefault !== undefined ? spec.apiDefault : spec.default)} | ${cell(spec.help)} |`);
  return ['| Option | Flag | Value | Default | What |', '|---|---|---|---|---|', ...rows].join('\n');
}

/** The markdown with every generated table brought up to date (an unknown group is an error). */
export function updateOptionTables(markdown: string): string {
  return markdown.replace(BEGIN, (_all, what: string, group: string | undefined) => {
    if (group !== undefined && !Object.hasOwn(OPTION_GROUPS, group)) throw new Error(`options:begin names no group "${group}" (groups: ${Object.keys(OPTION_GROUPS).join(', ')})`);
    const table = group === undefined ? apiTable() : groupTable(group as OptionGroup);
    return `<!-- options:begin ${what} -->\n${table}\n<!-- options:end -->`;
  });
}

/** The docs that hold generated tables. */
export const OPTION_DOCS = ['docs/cli.md', 'docs/api.md'] as const;
