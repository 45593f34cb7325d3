import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'web/**', 'scripts/**', 'bin/**'] },
  ...tseslint.configs.recommended,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [
            {
              from: 'package',
              package: 'node:test',
              name: ['describe', 'it', 'test', 'before', 'after', 'beforeEach', 'afterEach'],
            },
          ],
        },
      ],
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // No property after a spread in an object literal of the server or the protocol: Node.js 20's V8 kept
    // everything such an object referenced through each young-generation collection until the next full one
    // (docs/performance.md, twenty-sixth session). `Object.assign({}, a, { b })`, or the spread last, builds
    // the same object without that.
    files: ['src/server/**/*.ts', 'src/protocol/**/*.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: 'ObjectExpression > SpreadElement ~ Property',
          message:
            'A property after a spread keeps the object alive through young-generation GCs on Node 20: use Object.assign({}, a, { b }) (docs/performance.md, twenty-sixth session).',
        },
      ],
    },
  },
  {
    // CommonJS files loaded with `node --require` (bench/lib/tail-probe.cjs): outside the TypeScript project.
    files: ['**/*.cjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { sourceType: 'commonjs', parserOptions: { projectService: false } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
