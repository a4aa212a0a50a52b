/**
 * LinePrefixer (mesh run's `[NAME] ` before each line of an app's output): every line prefixed,
 * chunk boundaries anywhere, a last line without a newline ended at the end, and a line that never
 * ends cut at maxLine bytes (at a UTF-8 character boundary), so memory stays bounded.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LinePrefixer } from '../../src/base/util/line-prefixer.js';

/** Feeds the chunks, returns what came out, and the largest piece pushed at once. */
async function run(chunks: Array<string | Buffer>, maxLine?: number): Promise<{ text: string; pieces: Buffer[] }> {
  const p = new LinePrefixer('[app] ', maxLine);
  const pieces: Buffer[] = [];
  p.on('data', (b: Buffer) => pieces.push(b));
  const done = new Promise((r) => p.on('end', r));
  for (const c of chunks) p.write(typeof c === 'string' ? Buffer.from(c) : c);
  p.end();
  await done;
  return { text: Buffer.concat(pieces).toString('utf8'), pieces };
}

describe('LinePrefixer', () => {
  it('prefixes every line, whatever the chunks, and ends the last line', async () => {
    assert.equal((await run(['one\ntw', 'o\n\nthr', 'ee'])).text, '[app] one\n[app] two\n[app] \n[app] three\n');
    assert.equal((await run(['a\r\n'])).text, '[app] a\r\n');
    assert.equal((await run([])).text, '');
  });

  it('cuts a line longer than maxLine into lines of maxLine bytes', async () => {
    assert.equal((await run(['abcdefghij\n'], 4)).text, '[app] abcd\n[app] efgh\n[app] ij\n');
    // Exactly maxLine bytes, then the newline in the next chunk: one line.
    assert.equal((await run(['abcd', '\nx'], 4)).text, '[app] abcd\n[app] x\n');
    assert.equal((await run(['ab', 'cdef', 'gh\n'], 4)).text, '[app] abcd\n[app] efgh\n');
  });

  it('never cuts a UTF-8 character', async () => {
    // "é" is 2 bytes: a 5-byte line of "aéé" cut at 4 keeps "aé" and moves the second "é" on.
    const { text } = await run(['aéé€\n'], 4);
    assert.equal(text, '[app] aé\n[app] é\n[app] €\n');
    // Bytes that are not UTF-8 (continuation bytes only) are cut where the line is full.
    const junk = Buffer.alloc(10, 0x80);
    const out = await run([junk], 4);
    assert.deepEqual(out.pieces.map((b) => b.length), [6 + 4 + 1, 6 + 4 + 1, 6 + 2 + 1]);
  });

  it('holds at most maxLine bytes of a line that never ends', async () => {
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const { pieces } = await run(Array.from({ length: 64 }, () => chunk), 16 * 1024);
    assert.equal(pieces.length, (64 * 64) / 16);
    for (const p of pieces) assert.equal(p.length, 6 + 16 * 1024 + 1);
  });
});
