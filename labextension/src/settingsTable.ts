/**
 * What the kernel's snapshot says the settings form may offer: the allocator names its JAX
 * accepts, and the environment variable behind each setting. Pure: no JupyterLab imports.
 * Older kernels send neither field; that reads as "unknown".
 */

import { KernelSnapshot } from './types';

/** Where the allocator list came from, so the form can say why it is short. */
export type ChoicesSource = 'kernel' | 'no-snapshot' | 'unknown-to-kernel';

export interface AllocatorOptions {
  /** The names to offer after "not set", the notebook's current one always among them. */
  names: string[];
  source: ChoicesSource;
}

/** The allocator names the kernel's JAX accepts, or null when the kernel did not say. */
export function allocatorChoices(snapshot: KernelSnapshot | null): string[] | null {
  const raw = snapshot?.allocator_choices;
  if (!Array.isArray(raw)) {
    return null;
  }
  return raw.filter((x): x is string => typeof x === 'string' && x !== '');
}

/**
 * The allocator names the form offers: the kernel's list, and the notebook's current choice
 * even when the list lacks it (saving the form must not drop it silently).
 */
export function allocatorOptions(
  snapshot: KernelSnapshot | null,
  current: string | null
): AllocatorOptions {
  const choices = allocatorChoices(snapshot);
  const names = choices ? [...choices] : [];
  if (current && !names.includes(current)) {
    names.push(current);
  }
  const source: ChoicesSource = choices ? 'kernel' : snapshot ? 'unknown-to-kernel' : 'no-snapshot';
  return { names, source };
}

/** The environment variable JAX reads for `setting`, from the kernel's table; null if unknown. */
export function envVarOf(snapshot: KernelSnapshot | null, setting: string): string | null {
  const table = snapshot?.settings_table;
  if (!Array.isArray(table)) {
    return null;
  }
  const row = table.find(r => r && r.name === setting);
  return row && typeof row.env_var === 'string' && row.env_var ? row.env_var : null;
}
