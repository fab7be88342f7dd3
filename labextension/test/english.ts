/**
 * A translator that keeps the English text and fills in `%1`, `%2`... as JupyterLab's
 * nullTranslator does; `_n` passes `n` as `%1`.
 */

import { Translate } from '../src/translation';

function fill(text: string, args: unknown[]): string {
  return text.replace(/%(\d+)/g, (whole, i) =>
    Number(i) <= args.length ? String(args[Number(i) - 1]) : whole
  );
}

export const english: Translate = {
  __: (msgid, ...args) => fill(msgid, args),
  _n: (msgid, plural, n, ...args) => fill(n === 1 ? msgid : plural, [n, ...args])
};
