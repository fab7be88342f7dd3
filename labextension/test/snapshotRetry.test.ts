import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { SNAPSHOT_RETRY_MS, snapshotRetryDelayMs } from '../src/constants';

describe('snapshotRetryDelayMs: a kernel that did not answer in time is asked again', () => {
  test('after the first miss within a few seconds, then waiting longer each time', () => {
    const waits = [1, 2, 3, 4].map(snapshotRetryDelayMs);
    assert.equal(waits[0], 2000);
    for (let i = 1; i < waits.length; i++) {
      assert.ok(waits[i] > waits[i - 1]);
    }
  });

  test('never stops asking: past the list it keeps the last wait', () => {
    const last = SNAPSHOT_RETRY_MS[SNAPSHOT_RETRY_MS.length - 1];
    assert.equal(snapshotRetryDelayMs(50), last);
    assert.ok(last <= 30000);
  });
});
