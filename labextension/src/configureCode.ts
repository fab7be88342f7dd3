/**
 * The Python the panel sends a kernel to apply a notebook's settings, and how to read the
 * kernel's answer. Pure: no JupyterLab imports. Which variables JAX reads is the kernel's
 * business (jupyter_gpumem.configure); there is no copy of that table here.
 */

import { Translate } from './translation';
import { ExecutionError, NotebookAllocatorSettings } from './types';

function pyLiteral(value: boolean | number | string): string {
  if (typeof value === 'boolean') {
    return value ? 'True' : 'False';
  }
  if (typeof value === 'number') {
    return String(value);
  }
  return JSON.stringify(value);
}

/**
 * Python that calls jupyter_gpumem's configure_from_notebook with the settings that are set: it
 * validates and refuses as configure does, and `%gpumem status` names their source "notebook
 * settings". Without jupyter_gpumem in the kernel it fails on the import. A function keeps the
 * kernel's namespace clean.
 */
export function configureCode(s: NotebookAllocatorSettings): string {
  const args: string[] = [];
  if (s.preallocate !== null) {
    args.push(`preallocate=${pyLiteral(s.preallocate)}`);
  }
  if (s.fraction !== null) {
    args.push(`fraction=${pyLiteral(s.fraction)}`);
  }
  if (s.allocator !== null) {
    args.push(`allocator=${pyLiteral(s.allocator)}`);
  }
  return [
    'def __jupyter_gpumem_apply():',
    '    from jupyter_gpumem.allocator_shim import configure_from_notebook',
    `    configure_from_notebook(${args.join(', ')})`,
    'try:',
    '    __jupyter_gpumem_apply()',
    'finally:',
    '    del __jupyter_gpumem_apply'
  ].join('\n');
}

/** Whether the error says the kernel's Python has no jupyter_gpumem at all. */
export function isNotInstalled(error: ExecutionError): boolean {
  return (
    error.ename === 'ModuleNotFoundError' &&
    /^No module named '?jupyter_gpumem'?$/.test(error.evalue)
  );
}

/** Why a notebook's settings did not reach its kernel, in words. */
export function notAppliedText(error: ExecutionError, trans: Translate): string {
  if (isNotInstalled(error)) {
    return trans.__(
      "jupyter_gpumem is not installed in this kernel's environment; the notebook's settings were not applied"
    );
  }
  return trans.__(
    'Settings were not applied at kernel start: %1',
    `${error.ename}: ${error.evalue}`
  );
}
