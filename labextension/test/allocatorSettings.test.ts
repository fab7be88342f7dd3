import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  EMPTY_SETTINGS,
  fieldsOf,
  fractionProblem,
  hasAnySetting,
  metadataWithSettings,
  parseFraction,
  parseSettings,
  problemText,
  settingsOf,
  settingsRows
} from '../src/allocatorSettings';
import { english } from './english';
import fractionCases from './fraction-cases.json';

/** The problems of `raw` in words, as the panel shows them. */
function problemsOf(raw: unknown): string[] {
  return parseSettings(raw).problems.map(p => problemText(p, english));
}

describe('parseSettings: metadata.jupyter_gpumem', () => {
  test('no entry means no settings and no problems', () => {
    assert.deepEqual(parseSettings(undefined), { settings: null, problems: [] });
    assert.deepEqual(parseSettings(null), { settings: null, problems: [] });
  });

  test('nonsense in every key (as tests/test_reliability_fuzz.py writes it) is refused whole, key by key', () => {
    const nonsense = {
      preallocate: 'sometimes',
      fraction: [1, 2],
      allocator: { x: null },
      surprise: 1e308
    };
    assert.deepEqual(parseSettings(nonsense), {
      settings: null,
      problems: [
        { kind: 'unknown-key', key: 'surprise' },
        { kind: 'preallocate' },
        { kind: 'fraction', value: [1, 2] },
        { kind: 'allocator' }
      ]
    });
  });

  test('a full entry is taken as it is', () => {
    assert.deepEqual(parseSettings({ preallocate: false, fraction: 0.3, allocator: 'platform' }), {
      settings: { preallocate: false, fraction: 0.3, allocator: 'platform' },
      problems: []
    });
  });

  test('an empty object means every setting is JAX default', () => {
    assert.deepEqual(parseSettings({}), { settings: EMPTY_SETTINGS, problems: [] });
  });

  test('any lower-case allocator name is accepted; the kernel checks it exists', () => {
    assert.equal(parseSettings({ allocator: 'vmm' }).settings?.allocator, 'vmm');
    assert.equal(parseSettings({ allocator: 'cuda_async' }).settings?.allocator, 'cuda_async');
  });

  test('fraction 1 is allowed, fraction 0 is not', () => {
    assert.equal(parseSettings({ fraction: 1 }).settings?.fraction, 1);
    assert.deepEqual(problemsOf({ fraction: 0 }), [
      'fraction must be a number with 0 < fraction <= 1 (such as .3, 0.3 or 30%), got 0'
    ]);
  });

  test('a fraction above 1 voids the whole entry and says why', () => {
    const parsed = parseSettings({ preallocate: false, fraction: 1.5 });
    assert.equal(parsed.settings, null);
    assert.deepEqual(problemsOf({ preallocate: false, fraction: 1.5 }), [
      'fraction must be a number with 0 < fraction <= 1 (such as .3, 0.3 or 30%), got 1.5'
    ]);
  });

  test('a fraction written as a string is refused, quoted', () => {
    assert.deepEqual(problemsOf({ fraction: '0.5' }), [
      'fraction must be a number with 0 < fraction <= 1 (such as .3, 0.3 or 30%), got "0.5"'
    ]);
  });

  test('something other than an object is refused', () => {
    assert.deepEqual(problemsOf([]), ['metadata.jupyter_gpumem must be an object']);
    assert.deepEqual(problemsOf('off'), ['metadata.jupyter_gpumem must be an object']);
  });

  test('an unknown key is named with the valid ones', () => {
    assert.deepEqual(problemsOf({ colour: 'red' }), [
      'unknown key "colour" (valid: preallocate, fraction, allocator)'
    ]);
  });

  test('every problem is listed: unknown keys first, then each setting', () => {
    assert.deepEqual(problemsOf({ preallocate: 'yes', fraction: -1, allocator: 'CUDA', x: 1 }), [
      'unknown key "x" (valid: preallocate, fraction, allocator)',
      'preallocate must be true, false or null',
      'fraction must be a number with 0 < fraction <= 1 (such as .3, 0.3 or 30%), got -1',
      'allocator must be an allocator name (lower-case letters and _) or null'
    ]);
  });

  test('an allocator that is not a string is refused', () => {
    assert.equal(parseSettings({ allocator: 3 }).settings, null);
  });
});

describe('fractionProblem', () => {
  test('0 < f <= 1 is fine', () => {
    assert.equal(fractionProblem(0.01), null);
    assert.equal(fractionProblem(1), null);
  });

  test('zero, above one and non-finite numbers are problems', () => {
    for (const f of [0, 1.01, NaN, Infinity]) {
      assert.deepEqual(fractionProblem(f), { kind: 'fraction', value: f });
    }
  });
});

describe('hasAnySetting', () => {
  test('only a set value counts', () => {
    assert.equal(hasAnySetting(null), false);
    assert.equal(hasAnySetting(EMPTY_SETTINGS), false);
    assert.equal(hasAnySetting({ ...EMPTY_SETTINGS, preallocate: false }), true);
    assert.equal(hasAnySetting({ ...EMPTY_SETTINGS, allocator: 'bfc' }), true);
  });
});

describe('the settings form', () => {
  test('settings shown in the form read back unchanged', () => {
    const s = { preallocate: true, fraction: 0.45, allocator: 'cuda_async' };
    assert.deepEqual(fieldsOf(s), { preallocate: 'on', fraction: '0.45', allocator: 'cuda_async' });
    assert.deepEqual(settingsOf(fieldsOf(s)), { settings: s, problem: null });
  });

  test('empty fields mean JAX default', () => {
    assert.deepEqual(fieldsOf(EMPTY_SETTINGS), {
      preallocate: 'default',
      fraction: '',
      allocator: ''
    });
    assert.deepEqual(settingsOf({ preallocate: 'default', fraction: '  ', allocator: '' }), {
      settings: EMPTY_SETTINGS,
      problem: null
    });
  });

  test('a fraction with spaces around it is read', () => {
    assert.equal(
      settingsOf({ preallocate: 'off', fraction: ' 0.3 ', allocator: '' }).settings?.fraction,
      0.3
    );
  });

  test('a fraction above 1 stops saving and says why, quoting what was typed', () => {
    const read = settingsOf({ preallocate: 'off', fraction: '1.5', allocator: '' });
    assert.equal(read.settings, null);
    assert.equal(
      read.problem && problemText(read.problem, english),
      'fraction must be a number with 0 < fraction <= 1 (such as .3, 0.3 or 30%), got "1.5"'
    );
  });

  test('a fraction that is not a number is quoted back', () => {
    const read = settingsOf({ preallocate: 'off', fraction: 'half', allocator: '' });
    assert.equal(
      read.problem && problemText(read.problem, english),
      'fraction must be a number with 0 < fraction <= 1 (such as .3, 0.3 or 30%), got "half"'
    );
  });
});

describe('parseFraction: what %gpumem fraction F takes', () => {
  test('every shared case reads as the magic reads it', () => {
    for (const [text, want] of fractionCases.cases as Array<[string, number | null]>) {
      assert.equal(parseFraction(text), want, JSON.stringify(text));
    }
  });

  test('the form saves a percentage as the fraction it means', () => {
    assert.equal(
      settingsOf({ preallocate: 'off', fraction: '30%', allocator: '' }).settings?.fraction,
      0.3
    );
  });

  test('hexadecimal, which Number() would take, is refused as the magic refuses it', () => {
    assert.equal(settingsOf({ preallocate: 'off', fraction: '0x1', allocator: '' }).settings, null);
  });
});

describe('settingsRows: what the restart dialog lists', () => {
  test('each setting in words, JAX default where unset', () => {
    assert.deepEqual(
      settingsRows({ preallocate: false, fraction: 0.3, allocator: null }, english),
      [
        ['preallocate', 'off'],
        ['fraction', '0.3'],
        ['allocator', 'JAX default']
      ]
    );
    assert.deepEqual(
      settingsRows({ preallocate: true, fraction: null, allocator: 'vmm' }, english),
      [
        ['preallocate', 'on'],
        ['fraction', 'JAX default'],
        ['allocator', 'vmm']
      ]
    );
  });
});

describe('metadataWithSettings: what Save to notebook writes', () => {
  test('keys the panel does not know are kept beside the saved settings', () => {
    const before = { fraction: 0.5, note: 'written by hand', future_key: [1, 2] };
    const saved = { preallocate: false, fraction: 0.3, allocator: null };
    assert.deepEqual(metadataWithSettings(before, saved), {
      note: 'written by hand',
      future_key: [1, 2],
      preallocate: false,
      fraction: 0.3,
      allocator: null
    });
  });

  test('the saved settings replace the old values of the same keys', () => {
    const saved = { preallocate: null, fraction: null, allocator: 'platform' };
    assert.deepEqual(metadataWithSettings({ preallocate: true, fraction: 0.9 }, saved), saved);
  });

  test('no entry, or one that is not an object, gives the settings alone', () => {
    const saved = { preallocate: false, fraction: null, allocator: null };
    for (const raw of [undefined, null, 'off', [1], 3]) {
      assert.deepEqual(metadataWithSettings(raw, saved), saved);
    }
  });
});
