/**
 * What pure modules need of a translator. JupyterLab's TranslationBundle fits it; this file
 * imports nothing, so those modules run in node's test runner.
 */

export interface Translate {
  /** The message in the user's language, `%1`, `%2`... replaced by `args`. */
  __(msgid: string, ...args: any[]): string;
  /** The singular or plural message for `n`, `%1`... replaced by `args`. */
  _n(msgid: string, msgidPlural: string, n: number, ...args: any[]): string;
}
