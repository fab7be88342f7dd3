import * as React from 'react';
import { useRef, useState } from 'react';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';

import { loadExtension, NotLoadedError, SnapshotChannel } from '../kernelComm';
import {
  ApplyOutcome,
  EMPTY_SETTINGS,
  readNotebookSettings
} from '../notebookSettings';
import { KernelSnapshot, NotebookAllocatorSettings, Units } from '../types';
import { usePoll } from '../usePoll';
import { AllocatorView } from './AllocatorView';
import { SettingsForm } from './SettingsForm';
import { StateNotice } from './StateNotice';

type KernelView =
  | { kind: 'no-kernel' }
  | { kind: 'dead' }
  | { kind: 'restarting'; status: string }
  | { kind: 'not-loaded' }
  | { kind: 'busy'; last: KernelSnapshot | null; message: string }
  | { kind: 'snapshot'; snapshot: KernelSnapshot };

const SNAPSHOT_TIMEOUT_MS = 3000;
// After the kernel said "not loaded", ask again this rarely (each ask logs in the kernel).
const NOT_LOADED_RETRY_MS = 10000;

/** The active notebook: its JAX allocator, live, and its allocator settings. */
export function NotebookSection(props: {
  panel: NotebookPanel;
  visible: boolean;
  intervalMs: number;
  units: Units;
  outcome: ApplyOutcome | undefined;
  onSave: (s: NotebookAllocatorSettings) => void;
  onRestart: (s: NotebookAllocatorSettings) => void;
}): JSX.Element {
  const channel = useRef<SnapshotChannel | null>(null);
  const lastSnapshot = useRef<KernelSnapshot | null>(null);
  const notLoadedAt = useRef<{ kernel: Kernel.IKernelConnection; at: number } | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [reloadKey, setReloadKey] = useState(0);

  const fetchView = async (): Promise<KernelView> => {
    const kernel = props.panel.sessionContext.session?.kernel ?? null;
    if (!kernel) {
      return { kind: 'no-kernel' };
    }
    if (kernel.status === 'dead') {
      return { kind: 'dead' };
    }
    if (['restarting', 'autorestarting', 'starting', 'unknown'].includes(kernel.status)) {
      return { kind: 'restarting', status: kernel.status };
    }
    const skip = notLoadedAt.current;
    if (skip && skip.kernel === kernel && Date.now() - skip.at < NOT_LOADED_RETRY_MS) {
      return { kind: 'not-loaded' };
    }
    if (!channel.current || channel.current.kernel !== kernel) {
      channel.current?.dispose();
      channel.current = new SnapshotChannel(kernel);
      lastSnapshot.current = null;
    }
    try {
      const snapshot = await channel.current.request(SNAPSHOT_TIMEOUT_MS);
      lastSnapshot.current = snapshot;
      notLoadedAt.current = null;
      return { kind: 'snapshot', snapshot };
    } catch (error) {
      if (error instanceof NotLoadedError) {
        notLoadedAt.current = { kernel, at: Date.now() };
        return { kind: 'not-loaded' };
      }
      return { kind: 'busy', last: lastSnapshot.current, message: String((error as Error).message) };
    }
  };

  const poll = usePoll(
    fetchView,
    props.intervalMs,
    props.visible,
    `${props.panel.id}:${reloadKey}`
  );

  const load = async () => {
    const kernel = props.panel.sessionContext.session?.kernel;
    if (!kernel) {
      return;
    }
    setLoadError(await loadExtension(kernel));
    notLoadedAt.current = null;
    setReloadKey(k => k + 1);
  };

  const parsed = readNotebookSettings(props.panel);
  const view = poll.value;
  return (
    <div className="jp-GpuMem-notebook">
      <h3 className="jp-GpuMem-h">
        This notebook’s JAX allocator{' '}
        <span className="jp-GpuMem-muted jp-GpuMem-path">{props.panel.context.path}</span>
      </h3>
      {view === null ? (
        <div className="jp-GpuMem-muted">Asking the kernel…</div>
      ) : view.kind === 'no-kernel' ? (
        <StateNotice title="No kernel" detail="This notebook has no running kernel." />
      ) : view.kind === 'dead' ? (
        <StateNotice
          title="The kernel is dead"
          detail="Restart it to see its allocator; the settings below apply at the restart."
          kind="warn"
        />
      ) : view.kind === 'restarting' ? (
        <StateNotice
          title="The kernel is restarting"
          detail={`Status: ${view.status}. The allocator appears once it is ready.`}
        />
      ) : view.kind === 'not-loaded' ? (
        <StateNotice
          title="jupyter_gpumem is not loaded in this kernel"
          detail="Load it to see JAX's allocator live. Loading does not start JAX."
        >
          <button className="jp-mod-styled jp-mod-accept jp-GpuMem-load" onClick={() => void load()}>
            Load jupyter_gpumem
          </button>
          {loadError ? <div className="jp-GpuMem-error">{loadError}</div> : null}
        </StateNotice>
      ) : view.kind === 'busy' ? (
        <>
          <div className="jp-GpuMem-muted">{view.message}</div>
          {view.last ? <AllocatorView snapshot={view.last} units={props.units} /> : null}
        </>
      ) : (
        <AllocatorView snapshot={view.snapshot} units={props.units} />
      )}
      {props.outcome?.error ? (
        <div className="jp-GpuMem-warning" role="alert">
          Settings were not applied at kernel start: {props.outcome.error}
        </div>
      ) : null}
      <h3 className="jp-GpuMem-h">Allocator settings for this notebook</h3>
      <SettingsForm
        value={parsed.settings ?? EMPTY_SETTINGS}
        problems={parsed.problems}
        onSave={props.onSave}
        onRestart={props.onRestart}
      />
    </div>
  );
}
