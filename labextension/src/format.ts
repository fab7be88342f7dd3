import { Units } from './types';

const BINARY = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
const DECIMAL = ['B', 'kB', 'MB', 'GB', 'TB'];

/** A byte count for people: 1.50 GiB (binary) or 1.61 GB (decimal). */
export function formatBytes(n: number | null | undefined, units: Units): string {
  if (n === null || n === undefined || !Number.isFinite(n)) {
    return '–';
  }
  const { value, unit, digits } = scaled(n, units);
  return `${n < 0 ? '-' : ''}${value.toFixed(digits)} ${unit}`;
}

/** |n| in the largest unit it reaches, with the digits formatBytes shows. */
function scaled(
  n: number,
  units: Units
): { value: number; unit: string; divisor: number; digits: number } {
  const base = units === 'binary' ? 1024 : 1000;
  const names = units === 'binary' ? BINARY : DECIMAL;
  let value = Math.abs(n);
  let divisor = 1;
  let i = 0;
  while (value >= base && i < names.length - 1) {
    value /= base;
    divisor *= base;
    i++;
  }
  const digits = i === 0 ? 0 : value < 10 ? 2 : value < 100 ? 1 : 0;
  return { value, unit: names[i], divisor, digits };
}

/** A part of a whole in the whole's unit and digits: "12.3/40.0 GiB". */
export function formatBytesOf(part: number, whole: number, units: Units): string {
  const w = scaled(whole, units);
  return `${(part / w.divisor).toFixed(w.digits)}/${w.value.toFixed(w.digits)} ${w.unit}`;
}

export function formatPercent(f: number | null | undefined): string {
  if (f === null || f === undefined || !Number.isFinite(f)) {
    return '–';
  }
  return `${(f * 100).toFixed(1)}%`;
}

function pad2(n: number): string {
  return String(n).padStart(2, '0');
}

/** A local clock time, HH:MM:SS (24 h). */
export function clockTime(d: Date): string {
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

/**
 * How long since `iso` (an ISO 8601 time, as jupyter_server writes last_activity) at `nowMs`,
 * for people: "45 s", "12 min", "3 h 05 min", "2 d 4 h". Null when `iso` is absent or unreadable.
 * A time slightly in the future (clocks apart) reads as 0 s.
 */
export function elapsedSince(iso: string | null | undefined, nowMs: number): string | null {
  if (typeof iso !== 'string' || iso === '') {
    return null;
  }
  const then = Date.parse(iso);
  if (!Number.isFinite(then)) {
    return null;
  }
  const s = Math.max(0, Math.floor((nowMs - then) / 1000));
  if (s < 60) {
    return `${s} s`;
  }
  const min = Math.floor(s / 60);
  if (min < 60) {
    return `${min} min`;
  }
  const h = Math.floor(min / 60);
  if (h < 24) {
    return `${h} h ${pad2(min % 60)} min`;
  }
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}
