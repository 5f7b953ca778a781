/** Tests run on the compiled output (`npm test` builds first), so worker child processes and the
 * workflow bundle see exactly the code under test. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/dist/tests'],
  testMatch: ['**/*.test.js'],
  // The server soak and the kill soak run for an hour and more: `npm run test:server-soak`,
  // `npm run test:kill-soak`, never in `npm test`.
  testPathIgnorePatterns: ['/node_modules/', '/server-soak\\.test\\.js$', '/kill-soak\\.test\\.js$'],
  // No test reaches a provider's public endpoint (base URLs point at a closed loopback port), and
  // the suites' workers run local commands, as their operator allows.
  globalSetup: '<rootDir>/dist/tests/helpers/global-setup.js',
  // Each file's history sink: the workflow histories of every server its tests stop.
  setupFilesAfterEnv: ['<rootDir>/dist/tests/helpers/history-sink.js'],
  // A test that failed midway may leave a worker or a command running: killed and named here;
  // then every history the suites made is replayed on both workflow bundles.
  globalTeardown: '<rootDir>/dist/tests/helpers/global-teardown.js',
  testTimeout: 180000,
  // Two suites at a time: each spends much of its time waiting on processes it started (servers,
  // workers, containers), so two share two cores in about two-thirds of the time of one at a time.
  // Each suite has its own servers, task queues and folders, and no suite bounds a time or a
  // stall (the bench does), so the suite beside it cannot fail it.
  maxWorkers: 2,
};
