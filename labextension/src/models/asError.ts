/** A rejected poll's payload as an Error: Poll passes on whatever the factory threw. */

export function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(String(thrown));
}
