import { Units } from './types';

const BINARY = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
const DECIMAL = ['B', 'kB', 'MB', 'GB', 'TB'];

/** A byte count for people: 1.50 GiB (binary) or 1.61 GB (decimal). */
export function formatBytes(n: number | null | undefined, units: Units): string {
  if (n === null || n === undefined || !Number.isFinite(n)) {
    return '–';
  }
  const base = units === 'binary' ? 1024 : 1000;
  const names = units === 'binary' ? BINARY : DECIMAL;
  let value = Math.abs(n);
  let i = 0;
  while (value >= base && i < names.length - 1) {
    value /= base;
    i++;
  }
  const sign = n < 0 ? '-' : '';
  const digits = i === 0 ? 0 : value < 10 ? 2 : value < 100 ? 1 : 0;
  return `${sign}${value.toFixed(digits)} ${names[i]}`;
}

export function formatPercent(f: number | null | undefined): string {
  if (f === null || f === undefined || !Number.isFinite(f)) {
    return '–';
  }
  return `${(f * 100).toFixed(1)}%`;
}
