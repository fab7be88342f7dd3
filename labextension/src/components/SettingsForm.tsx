/**
 * Per-notebook allocator settings, saved in the notebook's metadata. The allocator names and
 * the variables behind each setting come from the kernel's snapshot.
 */

import * as React from 'react';
import { useEffect, useState } from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import {
  fieldsOf,
  problemText,
  SettingsFields,
  SettingsProblem,
  settingsOf
} from '../allocatorSettings';
import { allocatorOptions, ChoicesSource, envVarOf } from '../settingsTable';
import { KernelSnapshot, NotebookAllocatorSettings } from '../types';

function choicesHint(source: ChoicesSource, trans: TranslationBundle): string | null {
  switch (source) {
    case 'kernel':
      return null;
    case 'no-snapshot':
      return trans.__(
        'The list of allocators comes from the kernel: it appears once jupyter_gpumem is loaded there.'
      );
    case 'unknown-to-kernel':
      return trans.__(
        "This kernel's JAX does not say which allocators it accepts; %gpumem allocator NAME in a cell sets one."
      );
  }
}

/** The environment variable JAX reads for a setting, under its field. */
function EnvVarHint(props: { name: string | null; trans: TranslationBundle }): JSX.Element | null {
  return props.name ? (
    <div className="jp-GpuMem-envVar">{props.trans.__('sets %1', props.name)}</div>
  ) : null;
}

export function SettingsForm(props: {
  value: NotebookAllocatorSettings;
  problems: SettingsProblem[];
  /** The kernel's latest snapshot; null before it answers. */
  snapshot: KernelSnapshot | null;
  trans: TranslationBundle;
  onSave: (s: NotebookAllocatorSettings) => void;
  onRestart: (s: NotebookAllocatorSettings) => void;
}): JSX.Element {
  const { trans, snapshot } = props;
  const [fields, setFields] = useState<SettingsFields>(fieldsOf(props.value));
  const { preallocate, fraction, allocator } = props.value;
  useEffect(() => {
    setFields(fieldsOf({ preallocate, fraction, allocator }));
  }, [preallocate, fraction, allocator]);
  const edit = (change: Partial<SettingsFields>) => setFields(f => ({ ...f, ...change }));

  const read = settingsOf(fields);
  const options = allocatorOptions(snapshot, fields.allocator || null);
  const hint = choicesHint(options.source, trans);

  return (
    <form
      className="jp-GpuMem-form"
      onSubmit={e => {
        e.preventDefault();
        if (read.settings) {
          props.onSave(read.settings);
        }
      }}
    >
      {/* What the form holds: the notebook's settings, not the kernel's (a %gpumem cell may differ). */}
      <div className="jp-GpuMem-muted jp-GpuMem-formHint">
        {trans.__(
          "Saved in the notebook and applied when its kernel starts. Not set: JAX's default, unless a cell sets it."
        )}
      </div>
      {props.problems.length ? (
        <div className="jp-GpuMem-warning" role="alert">
          {trans.__(
            "Ignored the notebook's jupyter_gpumem metadata, JAX defaults apply: %1",
            props.problems.map(p => problemText(p, trans)).join('; ')
          )}
        </div>
      ) : null}
      <label>
        {trans.__('Preallocate')}
        <select
          name="preallocate"
          value={fields.preallocate}
          onChange={e => edit({ preallocate: e.target.value as SettingsFields['preallocate'] })}
        >
          <option value="default">{trans.__('not set')}</option>
          <option value="on">{trans.__('on')}</option>
          <option value="off">{trans.__('off')}</option>
        </select>
      </label>
      <EnvVarHint name={envVarOf(snapshot, 'preallocate')} trans={trans} />
      <label>
        {trans.__('Fraction')}
        <input
          name="fraction"
          type="text"
          inputMode="decimal"
          placeholder={trans.__('not set')}
          value={fields.fraction}
          aria-invalid={!!read.problem}
          onChange={e => edit({ fraction: e.target.value })}
        />
      </label>
      {read.problem ? (
        <div className="jp-GpuMem-error">{problemText(read.problem, trans)}</div>
      ) : null}
      <EnvVarHint name={envVarOf(snapshot, 'fraction')} trans={trans} />
      <label>
        {trans.__('Allocator')}
        <select
          name="allocator"
          value={fields.allocator}
          onChange={e => edit({ allocator: e.target.value })}
        >
          <option value="">{trans.__('not set')}</option>
          {options.names.map(a => (
            <option key={a} value={a}>
              {a}
            </option>
          ))}
        </select>
      </label>
      {hint ? <div className="jp-GpuMem-muted jp-GpuMem-choicesHint">{hint}</div> : null}
      <EnvVarHint name={envVarOf(snapshot, 'allocator')} trans={trans} />
      <div className="jp-GpuMem-formButtons">
        <button type="submit" className="jp-mod-styled" disabled={!read.settings}>
          {trans.__('Save to notebook')}
        </button>
        <button
          type="button"
          className="jp-mod-styled jp-mod-accept"
          disabled={!read.settings}
          onClick={() => read.settings && props.onRestart(read.settings)}
        >
          {trans.__('Restart kernel with these settings')}
        </button>
      </div>
    </form>
  );
}
