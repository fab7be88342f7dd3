/**
 * The status bar item: this notebook's GPU and JAX's pool, or a warning when JAX runs on the
 * CPU beside GPUs. It reads the panel's models and asks for nothing itself; a click opens the
 * panel.
 */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';

import { DevicesModel } from '../models/devicesModel';
import { KernelModel } from '../models/kernelModel';
import { statusSummary } from '../statusSummary';
import { Units } from '../types';

export class GpuStatusItem extends ReactWidget {
  constructor(
    private _props: {
      devices: DevicesModel;
      kernel: KernelModel;
      units: () => Units;
      trans: TranslationBundle;
      onClick: () => void;
    }
  ) {
    super();
    this.addClass('jp-GpuMem-status');
  }

  render(): JSX.Element {
    const { devices, kernel, trans } = this._props;
    return (
      <UseSignal signal={devices.changed} initialSender={devices}>
        {() => (
          <UseSignal signal={kernel.changed} initialSender={kernel}>
            {() => {
              const s = statusSummary(
                devices.reply,
                kernel.lastSnapshot,
                this._props.units(),
                trans
              );
              return (
                <div
                  className={`jp-GpuMem-statusText${s.warn ? ' jp-GpuMem-statusWarn' : ''}`}
                  data-warn={s.warn ? 'true' : 'false'}
                  title={s.title}
                  role="button"
                  onClick={this._props.onClick}
                >
                  {s.warn ? '⚠ ' : ''}
                  {s.text}
                </div>
              );
            }}
          </UseSignal>
        )}
      </UseSignal>
    );
  }
}
