/** What the active notebook's kernel says about JAX's allocator, or why it says nothing. */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { clockTime } from '../format';
import { KernelAnswerError, NoAnswerError } from '../kernelComm';
import { KernelModel } from '../models/kernelModel';
import { Units } from '../types';
import { AllocatorView } from './AllocatorView';
import { StateNotice } from './StateNotice';

function failureText(error: Error, trans: TranslationBundle): string {
  if (error instanceof NoAnswerError) {
    return trans.__('The kernel did not answer in time; it may be busy.');
  }
  if (error instanceof KernelAnswerError) {
    return trans.__('The kernel could not answer: %1', error.reason ?? trans.__('no reason given'));
  }
  return error.message;
}

export function KernelStateView(props: {
  model: KernelModel;
  units: Units;
  trans: TranslationBundle;
}): JSX.Element {
  const { model, units, trans } = props;
  const state = model.state;
  const last = model.lastSnapshot;
  const lastView = last ? <AllocatorView snapshot={last} units={units} trans={trans} /> : null;
  switch (state.kind) {
    case 'asking':
      return <div className="jp-GpuMem-muted">{trans.__('Asking the kernel…')}</div>;
    case 'no-kernel':
      return (
        <StateNotice
          title={trans.__('No kernel')}
          detail={trans.__('This notebook has no running kernel.')}
        />
      );
    case 'dead':
      return (
        <StateNotice
          title={trans.__('The kernel is dead')}
          detail={trans.__(
            'Restart it to see its allocator; the settings below apply at the restart.'
          )}
          kind="warn"
        />
      );
    case 'restarting':
      return (
        <StateNotice
          title={trans.__('The kernel is restarting')}
          detail={trans.__('Status: %1. The allocator appears once it is ready.', state.status)}
        />
      );
    case 'not-loaded':
      return (
        <StateNotice
          title={trans.__('jupyter_gpumem is not loaded in this kernel')}
          detail={trans.__("Load it to see JAX's allocator live. Loading does not start JAX.")}
        >
          <button
            className="jp-mod-styled jp-mod-accept jp-GpuMem-load"
            onClick={() => void model.load()}
          >
            {trans.__('Load jupyter_gpumem')}
          </button>
          {model.loadError ? (
            <div className="jp-GpuMem-error">
              {`${model.loadError.ename}: ${model.loadError.evalue}`}
            </div>
          ) : null}
        </StateNotice>
      );
    case 'busy': {
      const at = model.lastSnapshotAt;
      return (
        <>
          <div className="jp-GpuMem-muted jp-GpuMem-busy">
            {at
              ? trans.__('Busy; last state at %1', clockTime(at))
              : trans.__('Busy: running a cell; its state shows when the cell ends.')}
          </div>
          {lastView}
        </>
      );
    }
    case 'failed':
      return (
        <>
          <div className="jp-GpuMem-muted">{failureText(state.error, trans)}</div>
          {lastView}
        </>
      );
    case 'snapshot':
      return <AllocatorView snapshot={state.snapshot} units={units} trans={trans} />;
  }
}
