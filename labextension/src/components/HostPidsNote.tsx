/**
 * Said once above the cards: which GPUs list the host's pids (a container), short, with the
 * server's reason folded behind a click.
 */

import * as React from 'react';
import { TranslationBundle } from '@jupyterlab/translation';

import { HostPidsNote as Note } from '../deviceInfo';

export function HostPidsNote(props: { note: Note; trans: TranslationBundle }): JSX.Element {
  const { note, trans } = props;
  return (
    <details className="jp-GpuMem-hostPids" data-gpus={note.gpus.join(',')}>
      <summary>
        {trans._n(
          'GPU %2: host pids, which may be kernels of this server',
          'GPUs %2: host pids, which may be kernels of this server',
          note.gpus.length,
          note.gpus.join(', ')
        )}
      </summary>
      <div className="jp-GpuMem-muted">
        {note.reason ?? trans.__('no reason given')}.{' '}
        {trans.__("Each GPU's pids are in its process list.")}
      </div>
    </details>
  );
}
