import * as React from 'react';
import { ReactWidget } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';

import { PanelView, PanelViewProps } from './components/PanelView';

type Inputs = Omit<PanelViewProps, 'visible'>;

/** The sidebar widget. It re-renders when shown, hidden or told something changed. */
export class GpuMemPanel extends ReactWidget {
  constructor(private _inputs: () => Inputs) {
    super();
    this.addClass('jp-GpuMem');
  }

  render(): JSX.Element {
    // Polls run only while the panel is on screen.
    return <PanelView {...this._inputs()} visible={this.isVisible} />;
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.update();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.update();
  }
}
