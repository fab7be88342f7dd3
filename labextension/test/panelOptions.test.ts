import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { panelOptions, pollFrequency } from '../src/panelOptions';

describe('panelOptions', () => {
  test('no settings give every 2 s in binary units', () => {
    assert.deepEqual(panelOptions(undefined, undefined), { pollSeconds: 2, units: 'binary' });
  });

  test('a poll interval below half a second is raised to it', () => {
    assert.deepEqual(panelOptions(0.1, 'decimal'), { pollSeconds: 0.5, units: 'decimal' });
  });

  test('values of the wrong type fall back to the defaults', () => {
    assert.deepEqual(panelOptions('5', 'metric'), { pollSeconds: 2, units: 'binary' });
  });
});

describe('pollFrequency', () => {
  test('polls at the interval and backs off to 30 s after failures', () => {
    assert.deepEqual(pollFrequency(2), { interval: 2000, backoff: true, max: 30000 });
  });

  test('an interval above 30 s is its own ceiling', () => {
    assert.deepEqual(pollFrequency(60), { interval: 60000, backoff: true, max: 60000 });
  });

  test('never faster than every half second', () => {
    assert.equal(pollFrequency(0.1).interval, 500);
  });
});
