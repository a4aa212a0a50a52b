import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseDuration, parseSize } from '../../src/base/util/duration.js';

test('Go durations', () => {
  assert.equal(parseDuration('300ms'), 300);
  assert.equal(parseDuration('1m30s'), 90_000);
  assert.equal(parseDuration('1.5h'), 5_400_000);
  assert.equal(parseDuration('10s'), 10_000);
  assert.equal(parseDuration('1us'), 0.001);
  assert.equal(parseDuration('1µs'), 0.001);
  assert.equal(parseDuration('1000000ns'), 1);
  assert.equal(parseDuration('0'), 0);
  assert.equal(parseDuration('1h2m3.5s'), 3_723_500);
});

test('bad durations throw', () => {
  for (const bad of ['', 'abc', '10', '10 s', '5x', '-1s', 's', '1s2']) assert.throws(() => parseDuration(bad), /invalid duration/, bad);
});

test('sizes', () => {
  assert.equal(parseSize('4MiB'), 4 * 1024 * 1024);
  assert.equal(parseSize('1024'), 1024);
  assert.equal(parseSize('512KiB'), 512 * 1024);
  assert.equal(parseSize('1GiB'), 1024 ** 3);
  for (const bad of ['', '4MB', 'lots', '-1']) assert.throws(() => parseSize(bad), /invalid size/, bad);
});
