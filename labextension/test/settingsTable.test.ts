import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { allocatorChoices, allocatorOptions, envVarOf } from '../src/settingsTable';
import { KernelSnapshot } from '../src/types';

/** A snapshot as an idle kernel with JAX not started sends it, plus `extra`. */
function snapshot(extra: Partial<KernelSnapshot> = {}): KernelSnapshot {
  return {
    type: 'snapshot',
    backend_started: false,
    platform: null,
    settings: [],
    warnings: [],
    devices: [],
    reason: null,
    ...extra
  };
}

const NEWER_JAX = ['default', 'platform', 'bfc', 'cuda_async', 'vmm'];

describe('allocatorOptions', () => {
  test('before the kernel answers there is nothing to offer', () => {
    assert.deepEqual(allocatorOptions(null, null), { names: [], source: 'no-snapshot' });
  });

  test("the kernel's list is offered as it is", () => {
    assert.deepEqual(allocatorOptions(snapshot({ allocator_choices: NEWER_JAX }), null), {
      names: NEWER_JAX,
      source: 'kernel'
    });
  });

  test("the notebook's current allocator stays on offer when the list lacks it", () => {
    assert.deepEqual(allocatorOptions(snapshot({ allocator_choices: ['bfc'] }), 'vmm'), {
      names: ['bfc', 'vmm'],
      source: 'kernel'
    });
    assert.deepEqual(allocatorOptions(null, 'platform'), {
      names: ['platform'],
      source: 'no-snapshot'
    });
  });

  test('a kernel that does not know its allocators says so', () => {
    assert.equal(
      allocatorOptions(snapshot({ allocator_choices: null }), null).source,
      'unknown-to-kernel'
    );
  });

  test('an older kernel without the field reads as unknown', () => {
    assert.deepEqual(allocatorOptions(snapshot(), null), {
      names: [],
      source: 'unknown-to-kernel'
    });
  });
});

describe('allocatorChoices', () => {
  test('entries that are not names are dropped', () => {
    const odd = snapshot({ allocator_choices: ['bfc', '', 3, null] as unknown as string[] });
    assert.deepEqual(allocatorChoices(odd), ['bfc']);
  });
});

describe('envVarOf', () => {
  const table = snapshot({
    settings_table: [
      { name: 'preallocate', env_var: 'XLA_PYTHON_CLIENT_PREALLOCATE' },
      { name: 'fraction', env_var: 'XLA_PYTHON_CLIENT_MEM_FRACTION' }
    ]
  });

  test("a setting's variable comes from the kernel's table", () => {
    assert.equal(envVarOf(table, 'fraction'), 'XLA_PYTHON_CLIENT_MEM_FRACTION');
  });

  test('a setting the table lacks has no variable', () => {
    assert.equal(envVarOf(table, 'allocator'), null);
  });

  test('without a table, or a snapshot, there is no variable', () => {
    assert.equal(envVarOf(snapshot(), 'fraction'), null);
    assert.equal(envVarOf(null, 'fraction'), null);
  });
});
