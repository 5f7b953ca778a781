/** Tests run on the compiled output (`npm test` builds first), so worker child processes and the
 * workflow bundle see exactly the code under test. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/dist/tests'],
  testMatch: ['**/*.test.js'],
  // No test reaches a provider's public endpoint: base URLs point at a closed loopback port.
  globalSetup: '<rootDir>/dist/tests/helpers/network-guard.js',
  testTimeout: 180000,
  maxWorkers: 1,
};
