/** `npm run docs:options`: regenerates the flag tables of docs/ from the option schema (src/cli/options-doc.ts). */
import { readFileSync, writeFileSync } from 'node:fs';
import { OPTION_DOCS, updateOptionTables } from '../src/cli/options-doc.js';

for (const file of OPTION_DOCS) {
  const before = readFileSync(file, 'utf8');
  const after = updateOptionTables(before);
  if (after !== before) {
    writeFileSync(file, after);
    process.stdout.write(`${file}: tables updated\n`);
  }
}
