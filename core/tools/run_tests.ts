import { z } from 'zod';

export const run_testsArgs = z.strictObject({
  preset: z.literal('candidate_tests').describe('Which test command to run; only "candidate_tests" exists.'),
});

export const run_testsDescription =
  "Run the repository's candidate tests. Returns status (passed, failed, no_tests, timeout, cancelled), the " +
  'numbers of discovered, passed and failed tests, the failures and the tail of the output.';
