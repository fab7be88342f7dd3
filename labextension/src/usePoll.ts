import { useEffect, useRef, useState } from 'react';

export interface PollResult<T> {
  value: T | null;
  error: Error | null;
}

/**
 * Calls `fetch` now and every `intervalMs` while `active`; stops while hidden.
 * `key` restarts the poll (for example when the active notebook changes).
 */
export function usePoll<T>(
  fetch: () => Promise<T>,
  intervalMs: number,
  active: boolean,
  key: string
): PollResult<T> {
  const [state, setState] = useState<PollResult<T>>({
    value: null,
    error: null
  });
  const fetchRef = useRef(fetch);
  fetchRef.current = fetch;

  useEffect(() => {
    if (!active) {
      return;
    }
    let stopped = false;
    let timer: number | undefined;
    const tick = async () => {
      try {
        const value = await fetchRef.current();
        if (!stopped) {
          setState({ value, error: null });
        }
      } catch (error) {
        if (!stopped) {
          setState(prev => ({ value: prev.value, error: error as Error }));
        }
      }
      if (!stopped) {
        timer = window.setTimeout(tick, intervalMs);
      }
    };
    void tick();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, [active, intervalMs, key]);

  return state;
}
