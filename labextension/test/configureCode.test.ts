import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { configureCode, isNotInstalled, notAppliedText } from '../src/configureCode';
import { EMPTY_SETTINGS } from '../src/allocatorSettings';
import { english } from './english';

describe('configureCode', () => {
  test('every setting becomes an argument of configure_from_notebook', () => {
    assert.equal(
      configureCode({ preallocate: false, fraction: 0.3, allocator: 'platform' }),
      [
        'def __jupyter_gpumem_apply():',
        '    from jupyter_gpumem.allocator_shim import configure_from_notebook',
        '    configure_from_notebook(preallocate=False, fraction=0.3, allocator="platform")',
        'try:',
        '    __jupyter_gpumem_apply()',
        'finally:',
        '    del __jupyter_gpumem_apply'
      ].join('\n')
    );
  });

  test('settings left at JAX default are not passed', () => {
    const code = configureCode({ ...EMPTY_SETTINGS, allocator: 'cuda_async' });
    assert.match(code, /^ {4}configure_from_notebook\(allocator="cuda_async"\)$/m);
  });

  test('preallocate on is Python True', () => {
    const code = configureCode({ ...EMPTY_SETTINGS, preallocate: true });
    assert.match(code, /configure_from_notebook\(preallocate=True\)/);
  });

  test('the code sets no environment variable itself: the kernel owns that table', () => {
    const code = configureCode({ preallocate: false, fraction: 0.5, allocator: 'bfc' });
    assert.doesNotMatch(code, /XLA_|environ|except/);
  });
});

describe('reading the kernel’s answer', () => {
  const missing = { ename: 'ModuleNotFoundError', evalue: "No module named 'jupyter_gpumem'" };

  test('a kernel without jupyter_gpumem is told apart', () => {
    assert.equal(isNotInstalled(missing), true);
  });

  test('a missing dependency of jupyter_gpumem is not "not installed"', () => {
    assert.equal(
      isNotInstalled({ ename: 'ModuleNotFoundError', evalue: "No module named 'jax'" }),
      false
    );
  });

  test('without jupyter_gpumem the outcome says the settings were not applied', () => {
    assert.equal(
      notAppliedText(missing, english),
      "jupyter_gpumem is not installed in this kernel's environment; the notebook's settings were not applied"
    );
  });

  test('any other error is shown with its name', () => {
    assert.equal(
      notAppliedText({ ename: 'SettingsError', evalue: 'JAX has started' }, english),
      'Settings were not applied at kernel start: SettingsError: JAX has started'
    );
  });
});
