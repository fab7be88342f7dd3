/**
 * The sidebar widget. It owns the panel's models, which the status bar item reads too: the
 * devices model stops reading (closes its socket, or stops polling) while neither is on
 * screen, and the kernel model asks the kernel only when opened, on a kernel change, or after
 * the kernel pushes. It renders PanelView and re-renders when told the notebook or its
 * settings changed.
 */

import * as React from 'react';
import { NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';

import { PanelActions, PanelView } from './components/PanelView';
import { CullNotifier } from './cullNotifier';
import { ApplyOutcome } from './kernelStartHook';
import { DevicesModel } from './models/devicesModel';
import { KernelModel } from './models/kernelModel';
import { PanelOptions } from './types';

export interface GpuMemPanelOptions {
  options: PanelOptions;
  trans: TranslationBundle;
  actions: PanelActions;
  /** What happened when the notebook's settings were last applied to its kernel. */
  outcome: (panel: NotebookPanel) => ApplyOutcome | undefined;
  /** Whether something else that reads the models is on screen (the status bar item). */
  alsoWatched: () => boolean;
}

export class GpuMemPanel extends ReactWidget {
  readonly devices: DevicesModel;
  readonly kernel: KernelModel;
  private _options: PanelOptions;
  private _culls: CullNotifier;

  constructor(private _props: GpuMemPanelOptions) {
    super();
    this.addClass('jp-GpuMem');
    // A named region: a landmark, so that its content is not outside every landmark of the page
    // (JupyterLab's sidebar is a complementary landmark around the tab bar only).
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', _props.trans.__('GPU memory'));
    this._options = _props.options;
    const watched = () => this.isVisible || _props.alsoWatched();
    this.devices = new DevicesModel({
      pollSeconds: this._options.pollSeconds,
      notebookPath: () => this.kernel.notebook?.context.path ?? null,
      standby: () => !watched() || 'when-hidden'
    });
    this.kernel = new KernelModel({ isWatched: watched });
    // The server warns before it shuts down an idle kernel holding GPU memory, and says when it did.
    this._culls = new CullNotifier({
      devices: this.devices,
      trans: _props.trans,
      units: () => this._options.units,
      openNotebook: _props.actions.onOpen
    });
  }

  /** The notebook the panel shows; null when no notebook is active. */
  set notebook(panel: NotebookPanel | null) {
    if (panel !== this.kernel.notebook) {
      this.kernel.notebook = panel;
      this.devices.refresh();
      this.update();
    }
  }

  get options(): PanelOptions {
    return this._options;
  }

  set options(options: PanelOptions) {
    this._options = options;
    this.devices.pollSeconds = options.pollSeconds;
    this.update();
  }

  render(): JSX.Element {
    const nb = this.kernel.notebook;
    return (
      <PanelView
        devices={this.devices}
        kernel={this.kernel}
        notebook={nb}
        outcome={nb ? this._props.outcome(nb) : undefined}
        units={this._options.units}
        trans={this._props.trans}
        actions={this._props.actions}
      />
    );
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._culls.dispose();
    this.devices.dispose();
    this.kernel.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // The devices model may have stood by, and the kernel is asked only when needed: read now.
    this.devices.refresh();
    this.kernel.refresh();
    this.update();
  }
}
