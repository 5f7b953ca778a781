/** Tests run on the compiled output (`npm test` builds first), so worker child processes and the
 * workflow bundle see exactly the code under test. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/dist/tests'],
  testMatch: ['**/*.test.js'],
  testTimeout: 180000,
  maxWorkers: 1,
};
