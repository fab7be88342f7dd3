/**
 * What metadata.jupyter_gpumem and the settings form may hold, and how both are read and
 * checked. Pure: no JupyterLab imports. The kernel validates allocator names on apply.
 */

import { METADATA_KEY } from './constants';
import { Translate } from './translation';
import { NotebookAllocatorSettings } from './types';

export const EMPTY_SETTINGS: NotebookAllocatorSettings = {
  preallocate: null,
  fraction: null,
  allocator: null
};

const SETTING_KEYS = Object.keys(EMPTY_SETTINGS);

/** Allocator names look like this; which ones exist is the kernel's JAX's business. */
const ALLOCATOR_NAME = /^[a-z_]+$/;

/** Why a notebook's settings (or a field of the form) were not taken. */
export type SettingsProblem =
  | { kind: 'not-an-object' }
  | { kind: 'unknown-key'; key: string }
  | { kind: 'preallocate' }
  | { kind: 'fraction'; value: unknown }
  | { kind: 'allocator' };

export interface ParsedSettings {
  /** null when there are none, or when any problem makes the whole entry void. */
  settings: NotebookAllocatorSettings | null;
  problems: SettingsProblem[];
}

/**
 * A fraction as `%gpumem fraction F` reads it (jupyter_gpumem/core/units.py, parse_fraction): a
 * decimal number (`0.3`, `.3`, `3e-1`) or a percentage (`30%`), with 0 < F <= 1; null when the
 * text is not one. Python and these tests share their cases (test/fraction-cases.json).
 */
export function parseFraction(text: string): number | null {
  let body = text.trim();
  const percent = body.endsWith('%');
  if (percent) {
    body = body.slice(0, -1).trim();
  }
  if (!/^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$/.test(body)) {
    return null;
  }
  const value = percent ? Number(body) / 100 : Number(body);
  return fractionProblem(value) ? null : value;
}

/** The problem with one fraction (0 < f <= 1), or null when it is valid. */
export function fractionProblem(f: number): SettingsProblem | null {
  if (!Number.isFinite(f) || f <= 0 || f > 1) {
    return { kind: 'fraction', value: f };
  }
  return null;
}

/**
 * Reads metadata.jupyter_gpumem. Nonsense gives `settings: null` and the problems, so the
 * kernel starts with JAX's defaults and the panel can say why.
 */
export function parseSettings(raw: unknown): ParsedSettings {
  if (raw === undefined || raw === null) {
    return { settings: null, problems: [] };
  }
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    return { settings: null, problems: [{ kind: 'not-an-object' }] };
  }
  const obj = raw as Record<string, unknown>;
  const problems: SettingsProblem[] = [];
  const out: NotebookAllocatorSettings = { ...EMPTY_SETTINGS };
  for (const key of Object.keys(obj)) {
    if (!SETTING_KEYS.includes(key)) {
      problems.push({ kind: 'unknown-key', key });
    }
  }
  const p = obj.preallocate;
  if (p === true || p === false) {
    out.preallocate = p;
  } else if (p !== null && p !== undefined) {
    problems.push({ kind: 'preallocate' });
  }
  const f = obj.fraction;
  if (typeof f === 'number') {
    const problem = fractionProblem(f);
    if (problem) {
      problems.push(problem);
    } else {
      out.fraction = f;
    }
  } else if (f !== null && f !== undefined) {
    problems.push({ kind: 'fraction', value: f });
  }
  const a = obj.allocator;
  if (typeof a === 'string' && ALLOCATOR_NAME.test(a)) {
    out.allocator = a;
  } else if (a !== null && a !== undefined) {
    problems.push({ kind: 'allocator' });
  }
  return { settings: problems.length ? null : out, problems };
}

/**
 * What "Save to notebook" writes to metadata.jupyter_gpumem: the form's settings over what was
 * there, so keys the panel does not know (another version's, or notes a person wrote) stay.
 * Anything but an object there is replaced: it held no settings to keep.
 */
export function metadataWithSettings(
  raw: unknown,
  s: NotebookAllocatorSettings
): Record<string, unknown> {
  const kept =
    raw !== null && typeof raw === 'object' && !Array.isArray(raw)
      ? (raw as Record<string, unknown>)
      : {};
  return { ...kept, ...s };
}

/** A problem in words. */
export function problemText(p: SettingsProblem, trans: Translate): string {
  switch (p.kind) {
    case 'not-an-object':
      return trans.__('metadata.%1 must be an object', METADATA_KEY);
    case 'unknown-key':
      return trans.__('unknown key "%1" (valid: %2)', p.key, SETTING_KEYS.join(', '));
    case 'preallocate':
      return trans.__('preallocate must be true, false or null');
    case 'fraction':
      return trans.__(
        'fraction must be a number with 0 < fraction <= 1 (such as .3, 0.3 or 30%), got %1',
        typeof p.value === 'number' ? String(p.value) : JSON.stringify(p.value)
      );
    case 'allocator':
      return trans.__('allocator must be an allocator name (lower-case letters and _) or null');
  }
}

export function hasAnySetting(s: NotebookAllocatorSettings | null): boolean {
  return !!s && (s.preallocate !== null || s.fraction !== null || s.allocator !== null);
}

/** The settings form's fields as the user edits them. */
export interface SettingsFields {
  preallocate: 'default' | 'on' | 'off';
  /** Free text; empty means JAX's default. */
  fraction: string;
  /** Empty means JAX's default. */
  allocator: string;
}

/** The form's fields showing `s`. */
export function fieldsOf(s: NotebookAllocatorSettings): SettingsFields {
  return {
    preallocate: s.preallocate === null ? 'default' : s.preallocate ? 'on' : 'off',
    fraction: s.fraction === null ? '' : String(s.fraction),
    allocator: s.allocator ?? ''
  };
}

/** The settings the form's fields say, or the problem that stops them being saved. */
export function settingsOf(
  fields: SettingsFields
):
  | { settings: NotebookAllocatorSettings; problem: null }
  | { settings: null; problem: SettingsProblem } {
  const text = fields.fraction.trim();
  const fraction = text === '' ? null : parseFraction(text);
  if (text !== '' && fraction === null) {
    return { settings: null, problem: { kind: 'fraction', value: text } };
  }
  return {
    settings: {
      preallocate: fields.preallocate === 'default' ? null : fields.preallocate === 'on',
      fraction,
      allocator: fields.allocator === '' ? null : fields.allocator
    },
    problem: null
  };
}

/** The settings as a restart will apply them, one [name, value] row each, for the confirmation. */
export function settingsRows(
  s: NotebookAllocatorSettings,
  trans: Translate
): Array<[string, string]> {
  const unset = trans.__('JAX default');
  return [
    [
      'preallocate',
      s.preallocate === null ? unset : s.preallocate ? trans.__('on') : trans.__('off')
    ],
    ['fraction', s.fraction === null ? unset : String(s.fraction)],
    ['allocator', s.allocator ?? unset]
  ];
}
