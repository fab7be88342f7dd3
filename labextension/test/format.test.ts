import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { clockTime, elapsedSince, formatBytes, formatBytesOf, formatPercent } from '../src/format';

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

describe('clockTime', () => {
  test('hours, minutes and seconds, two digits each, 24 h', () => {
    assert.equal(clockTime(new Date(2026, 10, 22, 9, 5, 7)), '09:05:07');
    assert.equal(clockTime(new Date(2026, 10, 22, 23, 59, 0)), '23:59:00');
  });
});

describe('elapsedSince: a kernel idle since last_activity', () => {
  const now = Date.parse('2026-11-22T12:00:00Z');

  test('seconds, minutes, hours and days', () => {
    assert.equal(elapsedSince('2026-11-22T11:59:15Z', now), '45 s');
    assert.equal(elapsedSince('2026-11-22T11:48:00.123456Z', now), '11 min');
    assert.equal(elapsedSince('2026-11-22T08:55:00Z', now), '3 h 05 min');
    assert.equal(elapsedSince('2026-11-20T08:00:00Z', now), '2 d 4 h');
  });

  test('an offset other than Z is honoured', () => {
    assert.equal(elapsedSince('2026-11-22T12:50:00+01:00', now), '10 min');
  });

  test('a time a little ahead of this clock reads as 0 s', () => {
    assert.equal(elapsedSince('2026-11-22T12:00:02Z', now), '0 s');
  });

  test('absent or unreadable gives null: no idle time is shown', () => {
    assert.equal(elapsedSince(null, now), null);
    assert.equal(elapsedSince(undefined, now), null);
    assert.equal(elapsedSince('yesterday', now), null);
  });
});

describe('formatBytesOf', () => {
  test('the part in the unit and digits of the whole', () => {
    assert.equal(formatBytesOf(12.3 * GiB, 40 * GiB, 'binary'), '12.3/40.0 GiB');
    assert.equal(formatBytesOf(512 * 1024 ** 2, 80 * GiB, 'binary'), '0.5/80.0 GiB');
    assert.equal(formatBytesOf(0, 640 * GiB, 'binary'), '0/640 GiB');
  });
});
