import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { formatBytes, formatPercent } from '../src/format';

const GiB = 1024 ** 3;

describe('formatBytes', () => {
  test('whole bytes have no decimals', () => {
    assert.equal(formatBytes(0, 'binary'), '0 B');
    assert.equal(formatBytes(1023, 'binary'), '1023 B');
  });

  test('binary units: two decimals below 10, one below 100, none above', () => {
    assert.equal(formatBytes(1024, 'binary'), '1.00 KiB');
    assert.equal(formatBytes(1.5 * GiB, 'binary'), '1.50 GiB');
    assert.equal(formatBytes(40 * GiB, 'binary'), '40.0 GiB');
    assert.equal(formatBytes(640 * GiB, 'binary'), '640 GiB');
  });

  test('decimal units count in thousands', () => {
    assert.equal(formatBytes(40 * GiB, 'decimal'), '42.9 GB');
    assert.equal(formatBytes(1000, 'decimal'), '1.00 kB');
    assert.equal(formatBytes(999, 'decimal'), '999 B');
  });

  test('beyond TiB the number grows instead of the unit', () => {
    assert.equal(formatBytes(1024 ** 5, 'binary'), '1024 TiB');
  });

  test('a negative count keeps its sign', () => {
    assert.equal(formatBytes(-1.5 * GiB, 'binary'), '-1.50 GiB');
  });

  test('a missing or non-finite count is a dash, never 0 B', () => {
    for (const n of [null, undefined, NaN, Infinity]) {
      assert.equal(formatBytes(n, 'binary'), '–');
    }
  });
});

describe('formatPercent', () => {
  test('a fraction is shown as a percentage with one decimal', () => {
    assert.equal(formatPercent(0.1234), '12.3%');
    assert.equal(formatPercent(0), '0.0%');
    assert.equal(formatPercent(1), '100.0%');
  });

  test('a missing fraction is a dash', () => {
    assert.equal(formatPercent(null), '–');
    assert.equal(formatPercent(undefined), '–');
    assert.equal(formatPercent(NaN), '–');
  });
});
