/** Running code in a kernel without a trace in the notebook. */

import { Kernel } from '@jupyterlab/services';

import { ExecutionError } from './types';

/** Runs `code` silently; resolves to the kernel's error, or null when it ran. */
export async function executeSilently(
  kernel: Kernel.IKernelConnection,
  code: string
): Promise<ExecutionError | null> {
  const future = kernel.requestExecute({
    code,
    silent: true,
    store_history: false,
    stop_on_error: false
  });
  const reply = await future.done;
  const content = reply.content as any;
  if (content.status === 'error') {
    return { ename: String(content.ename), evalue: String(content.evalue) };
  }
  return null;
}

/** An exception thrown on the way (a kernel disposed mid-request) as an execution error. */
export function asExecutionError(e: unknown): ExecutionError {
  return e instanceof Error
    ? { ename: e.name || 'Error', evalue: e.message }
    : { ename: 'Error', evalue: String(e) };
}
