import { ISessionContext } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { ALLOCATOR_CHOICES, METADATA_KEY } from './constants';
import { NotebookAllocatorSettings } from './types';

export const EMPTY_SETTINGS: NotebookAllocatorSettings = {
  preallocate: null,
  fraction: null,
  allocator: null
};

export interface ParsedSettings {
  settings: NotebookAllocatorSettings | null;
  problems: string[];
}

/** Validates one fraction: 0 < f <= 1. Returns a message, or null when valid. */
export function fractionProblem(f: number): string | null {
  if (!Number.isFinite(f) || f <= 0 || f > 1) {
    return `fraction must be a number with 0 < fraction <= 1, got ${f}`;
  }
  return null;
}

/**
 * Reads metadata.jupyter_gpumem. Nonsense gives `settings: null` and the problems,
 * so the kernel starts with JAX's defaults and the panel can say why.
 */
export function parseSettings(raw: unknown): ParsedSettings {
  if (raw === undefined || raw === null) {
    return { settings: null, problems: [] };
  }
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    return {
      settings: null,
      problems: [`metadata.${METADATA_KEY} must be an object`]
    };
  }
  const obj = raw as Record<string, unknown>;
  const problems: string[] = [];
  const out: NotebookAllocatorSettings = { ...EMPTY_SETTINGS };
  const known = Object.keys(EMPTY_SETTINGS);
  for (const key of Object.keys(obj)) {
    if (!known.includes(key)) {
      problems.push(`unknown key "${key}" (valid: ${known.join(', ')})`);
    }
  }
  const p = obj.preallocate;
  if (p === true || p === false) {
    out.preallocate = p;
  } else if (p !== null && p !== undefined) {
    problems.push('preallocate must be true, false or null');
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
    problems.push('fraction must be a number with 0 < fraction <= 1, or null');
  }
  const a = obj.allocator;
  if (typeof a === 'string' && /^[a-z_]+$/.test(a)) {
    out.allocator = a;
  } else if (a !== null && a !== undefined) {
    problems.push(
      `allocator must be one of ${ALLOCATOR_CHOICES.join(', ')} (or null)`
    );
  }
  return { settings: problems.length ? null : out, problems };
}

export function hasAnySetting(s: NotebookAllocatorSettings | null): boolean {
  return (
    !!s && (s.preallocate !== null || s.fraction !== null || s.allocator !== null)
  );
}

function pyLiteral(value: boolean | number | string): string {
  if (typeof value === 'boolean') {
    return value ? 'True' : 'False';
  }
  if (typeof value === 'number') {
    return String(value);
  }
  return JSON.stringify(value);
}

/**
 * Python run silently in the kernel. Uses jupyter_gpumem.configure, which validates
 * and refuses once JAX has started; without the package it sets JAX's variables itself.
 */
export function configureCode(s: NotebookAllocatorSettings): string {
  const args: string[] = [];
  const env: string[] = [];
  if (s.preallocate !== null) {
    args.push(`preallocate=${pyLiteral(s.preallocate)}`);
    env.push(`'XLA_PYTHON_CLIENT_PREALLOCATE': '${s.preallocate ? 'true' : 'false'}'`);
  }
  if (s.fraction !== null) {
    args.push(`fraction=${pyLiteral(s.fraction)}`);
    env.push(`'XLA_PYTHON_CLIENT_MEM_FRACTION': '${s.fraction}'`);
  }
  if (s.allocator !== null) {
    args.push(`allocator=${pyLiteral(s.allocator)}`);
    env.push(`'XLA_PYTHON_CLIENT_ALLOCATOR': ${JSON.stringify(s.allocator)}`);
  }
  return [
    'def __jupyter_gpumem_apply():',
    '    try:',
    '        import jupyter_gpumem',
    '    except ImportError:',
    '        import os',
    `        os.environ.update({${env.join(', ')}})`,
    '        return',
    `    jupyter_gpumem.configure(${args.join(', ')})`,
    'try:',
    '    __jupyter_gpumem_apply()',
    'finally:',
    '    del __jupyter_gpumem_apply'
  ].join('\n');
}

/** Runs code without a trace in the notebook; resolves to an error text or null. */
export async function executeSilently(
  kernel: Kernel.IKernelConnection,
  code: string
): Promise<string | null> {
  const future = kernel.requestExecute({
    code,
    silent: true,
    store_history: false,
    stop_on_error: false
  });
  const reply = await future.done;
  const content = reply.content as any;
  if (content.status === 'error') {
    return `${content.ename}: ${content.evalue}`;
  }
  return null;
}

export function readNotebookSettings(panel: NotebookPanel): ParsedSettings {
  const model = panel.context.model;
  return parseSettings(model ? model.getMetadata(METADATA_KEY) : undefined);
}

export function writeNotebookSettings(
  panel: NotebookPanel,
  s: NotebookAllocatorSettings
): void {
  panel.context.model.setMetadata(METADATA_KEY, { ...s });
}

/** What happened the last time settings were applied to a notebook's kernel. */
export interface ApplyOutcome {
  error: string | null;
}

/**
 * Applies each notebook's metadata settings at every kernel start and restart, before any
 * user cell: the execute request is queued on the new kernel connection first.
 */
export class KernelStartHook {
  private _outcomes = new Map<string, ApplyOutcome>();
  private _changed = new Signal<this, ApplyOutcome>(this);

  get applied(): ISignal<this, ApplyOutcome> {
    return this._changed;
  }

  outcome(panel: NotebookPanel): ApplyOutcome | undefined {
    return this._outcomes.get(panel.id);
  }

  watch(panel: NotebookPanel): void {
    const ctx = panel.sessionContext;
    const onStatus = (kernel: Kernel.IKernelConnection, status: Kernel.Status) => {
      if (status === 'restarting') {
        // restart() clears queued messages right after this signal; queue after it.
        void Promise.resolve().then(() => this._apply(panel, kernel));
      } else if (status === 'autorestarting') {
        pendingAuto.add(kernel);
      }
    };
    const onConnection = (
      kernel: Kernel.IKernelConnection,
      status: Kernel.ConnectionStatus
    ) => {
      if (status === 'connected' && pendingAuto.has(kernel)) {
        pendingAuto.delete(kernel);
        void this._apply(panel, kernel);
      }
    };
    const pendingAuto = new Set<Kernel.IKernelConnection>();
    const attach = (kernel: Kernel.IKernelConnection | null) => {
      if (!kernel) {
        return;
      }
      kernel.statusChanged.connect(onStatus);
      kernel.connectionStatusChanged.connect(onConnection);
      void this._apply(panel, kernel);
    };
    ctx.kernelChanged.connect(
      (_: ISessionContext, change: { oldValue: Kernel.IKernelConnection | null; newValue: Kernel.IKernelConnection | null }) => {
        if (change.oldValue === change.newValue) {
          // restartKernel() reports the same connection as changed; the restart was hooked.
          return;
        }
        if (change.oldValue) {
          change.oldValue.statusChanged.disconnect(onStatus);
          change.oldValue.connectionStatusChanged.disconnect(onConnection);
        }
        attach(change.newValue);
      }
    );
    attach(ctx.session?.kernel ?? null);
    panel.disposed.connect(() => this._outcomes.delete(panel.id));
  }

  private async _apply(
    panel: NotebookPanel,
    kernel: Kernel.IKernelConnection
  ): Promise<void> {
    // The model may still be loading when the kernel starts with the document.
    await panel.context.ready;
    const { settings } = readNotebookSettings(panel);
    let error: string | null = null;
    if (settings && hasAnySetting(settings)) {
      try {
        error = await executeSilently(kernel, configureCode(settings));
      } catch (e) {
        error = String(e);
      }
    }
    const outcome = { error };
    this._outcomes.set(panel.id, outcome);
    this._changed.emit(outcome);
  }
}
