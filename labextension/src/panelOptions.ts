/**
 * The panel's user settings (schema/plugin.json) as the panel uses them, and the poll timing
 * they give. Pure: no JupyterLab imports.
 */

import { DEFAULT_POLL_SECONDS, MAX_BACKOFF_SECONDS, MIN_POLL_SECONDS } from './constants';
import { PanelOptions } from './types';

/** Options from the settings' composite values; anything odd falls back to the default. */
export function panelOptions(pollInterval: unknown, units: unknown): PanelOptions {
  const poll =
    typeof pollInterval === 'number' && Number.isFinite(pollInterval)
      ? pollInterval
      : DEFAULT_POLL_SECONDS;
  return {
    pollSeconds: Math.max(poll, MIN_POLL_SECONDS),
    units: units === 'decimal' ? 'decimal' : 'binary'
  };
}

/** Poll timing in ms: every `pollSeconds`; after failures, backing off to at most 30 s. */
export function pollFrequency(pollSeconds: number): {
  interval: number;
  backoff: true;
  max: number;
} {
  const interval = Math.round(Math.max(pollSeconds, MIN_POLL_SECONDS) * 1000);
  return { interval, backoff: true, max: Math.max(interval, MAX_BACKOFF_SECONDS * 1000) };
}
