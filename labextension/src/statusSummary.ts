/**
 * The status bar's line for the active notebook: which GPU its kernel uses, how full that GPU
 * is (every process's use, as nvidia-smi counts it), this notebook's share and JAX's pool, e.g.
 * `GPU 0 · 36.5/40.0 GiB · this notebook 30.5 GiB · JAX pool 30.0 GiB`; a warning when JAX runs
 * on the CPU while GPUs are there. Pure: it reads the panel's models' data, no JupyterLab.
 */

import { formatBytes, formatBytesOf } from './format';
import { Translate } from './translation';
import { DevicesReply, KernelSnapshot, ReadableDevice, Units } from './types';

export interface StatusSummary {
  text: string;
  /** The tooltip: the same, said whole. */
  title: string;
  warn: boolean;
}

function readable(reply: DevicesReply | null): ReadableDevice[] {
  if (!reply || reply.state !== 'ok') {
    return [];
  }
  return reply.devices.filter((d): d is ReadableDevice => d.readable);
}

export function statusSummary(
  reply: DevicesReply | null,
  snapshot: KernelSnapshot | null,
  units: Units,
  trans: Translate
): StatusSummary {
  const gpus = readable(reply);
  const fallback = snapshot?.cpu_fallback;
  if (fallback) {
    return {
      text: trans.__('JAX on CPU · %1 GPUs here', fallback.gpus),
      title: fallback.sentence,
      warn: true
    };
  }
  // The GPU this notebook uses: JAX's first device on a GPU, else where the server sees its kernel.
  const jaxDevice = snapshot?.backend_started
    ? snapshot.devices.find(d => d.nvml_index !== null && d.nvml_index !== undefined)
    : undefined;
  const held = gpus.find(d => d.this_kernel_bytes > 0);
  const device = jaxDevice ? gpus.find(d => d.index === jaxDevice.nvml_index) : held;
  if (device) {
    const parts = [
      trans.__('GPU %1', device.index),
      formatBytesOf(device.used, device.total, units),
      trans.__('this notebook %1', formatBytes(device.this_kernel_bytes, units))
    ];
    const pool = jaxDevice ? (jaxDevice.pool_bytes ?? jaxDevice.bytes_limit) : null;
    if (pool !== null && pool !== undefined) {
      parts.push(trans.__('JAX pool %1', formatBytes(pool, units)));
    }
    const text = parts.join(' · ');
    return {
      text,
      title: trans.__(
        "GPU %1 (%2): %3 of %4 in use by every process; this notebook's kernel holds %5 of it.",
        device.index,
        device.name,
        formatBytes(device.used, units),
        formatBytes(device.total, units),
        formatBytes(device.this_kernel_bytes, units)
      ),
      warn: false
    };
  }
  if (!reply) {
    return { text: trans.__('GPU'), title: trans.__('Reading the GPUs…'), warn: false };
  }
  if (gpus.length === 0) {
    return {
      text: trans.__('No GPU'),
      title: reply.reason ?? trans.__('No GPU here.'),
      warn: false
    };
  }
  const count = trans._n('%1 GPU', '%1 GPUs', gpus.length);
  if (snapshot && !snapshot.backend_started) {
    return {
      text: `${count} · ${trans.__('JAX not started')}`,
      title: trans.__("JAX has not started in this notebook's kernel."),
      warn: false
    };
  }
  return { text: count, title: trans.__('GPU memory: click to open the panel.'), warn: false };
}
