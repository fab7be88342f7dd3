import * as React from 'react';
import { useEffect, useState } from 'react';

import { ALLOCATOR_CHOICES } from '../constants';
import { fractionProblem } from '../notebookSettings';
import { NotebookAllocatorSettings } from '../types';

type Tri = 'default' | 'on' | 'off';

function toTri(p: boolean | null): Tri {
  return p === null ? 'default' : p ? 'on' : 'off';
}

/** Per-notebook allocator settings, saved in the notebook's metadata. */
export function SettingsForm(props: {
  value: NotebookAllocatorSettings;
  problems: string[];
  onSave: (s: NotebookAllocatorSettings) => void;
  onRestart: (s: NotebookAllocatorSettings) => void;
}): JSX.Element {
  const [prealloc, setPrealloc] = useState<Tri>(toTri(props.value.preallocate));
  const [fraction, setFraction] = useState<string>(
    props.value.fraction === null ? '' : String(props.value.fraction)
  );
  const [allocator, setAllocator] = useState<string>(
    props.value.allocator ?? ''
  );
  useEffect(() => {
    setPrealloc(toTri(props.value.preallocate));
    setFraction(props.value.fraction === null ? '' : String(props.value.fraction));
    setAllocator(props.value.allocator ?? '');
  }, [props.value.preallocate, props.value.fraction, props.value.allocator]);

  const fractionValue = fraction.trim() === '' ? null : Number(fraction);
  const error =
    fractionValue === null ? null : fractionProblem(fractionValue as number);
  const current = (): NotebookAllocatorSettings => ({
    preallocate: prealloc === 'default' ? null : prealloc === 'on',
    fraction: fractionValue,
    allocator: allocator === '' ? null : allocator
  });

  return (
    <form
      className="jp-GpuMem-form"
      onSubmit={e => {
        e.preventDefault();
        if (!error) {
          props.onSave(current());
        }
      }}
    >
      {props.problems.length ? (
        <div className="jp-GpuMem-warning" role="alert">
          Ignored the notebook's jupyter_gpumem metadata, JAX defaults apply:{' '}
          {props.problems.join('; ')}
        </div>
      ) : null}
      <label>
        Preallocate
        <select
          name="preallocate"
          value={prealloc}
          onChange={e => setPrealloc(e.target.value as Tri)}
        >
          <option value="default">JAX default</option>
          <option value="on">on</option>
          <option value="off">off</option>
        </select>
      </label>
      <label>
        Fraction
        <input
          name="fraction"
          type="text"
          inputMode="decimal"
          placeholder="JAX default (0.75)"
          value={fraction}
          aria-invalid={!!error}
          onChange={e => setFraction(e.target.value)}
        />
      </label>
      {error ? <div className="jp-GpuMem-error">{error}</div> : null}
      <label>
        Allocator
        <select
          name="allocator"
          value={allocator}
          onChange={e => setAllocator(e.target.value)}
        >
          <option value="">JAX default</option>
          {ALLOCATOR_CHOICES.map(a => (
            <option key={a} value={a}>
              {a}
            </option>
          ))}
        </select>
      </label>
      <div className="jp-GpuMem-formButtons">
        <button type="submit" className="jp-mod-styled" disabled={!!error}>
          Save to notebook
        </button>
        <button
          type="button"
          className="jp-mod-styled jp-mod-accept"
          disabled={!!error}
          onClick={() => props.onRestart(current())}
        >
          Restart kernel with these settings
        </button>
      </div>
    </form>
  );
}
