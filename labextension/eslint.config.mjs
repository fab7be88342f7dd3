// The panel's TypeScript: eslint's and typescript-eslint's recommended rules, with prettier
// deciding layout (eslint-config-prettier turns off the rules it owns). `jlpm lint:check`.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['lib/', 'build-test/', 'node_modules/', '.yarn/', '**/*.js', '**/*.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  prettier,
  {
    files: ['src/**/*.{ts,tsx}', 'test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      // JupyterLab's own types hand out `any` (kernel messages, translator arguments).
      '@typescript-eslint/no-explicit-any': 'off'
    }
  },
  {
    // The monitor's plot is plain JavaScript shipped with the Python package, loaded as it ships.
    files: ['test/monitorThinning.test.ts'],
    rules: { '@typescript-eslint/no-require-imports': 'off' }
  }
);
