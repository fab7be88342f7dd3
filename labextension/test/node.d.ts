/** The parts of node's test runner and assert module the tests use (there is no @types/node here). */

declare module 'node:test' {
  export function describe(name: string, fn: () => void): void;
  export function test(name: string, fn: () => void | Promise<void>): void;
}

declare module 'node:assert/strict' {
  interface Assert {
    ok(value: unknown, message?: string): void;
    equal(actual: unknown, expected: unknown, message?: string): void;
    notEqual(actual: unknown, expected: unknown, message?: string): void;
    deepEqual(actual: unknown, expected: unknown, message?: string): void;
    match(value: string, pattern: RegExp, message?: string): void;
    doesNotMatch(value: string, pattern: RegExp, message?: string): void;
  }
  const assert: Assert;
  export = assert;
}

/** CommonJS's require, as the compiled tests have it: loads the monitor plot's ES module (node >= 20.19). */
declare function require(id: string): unknown;
