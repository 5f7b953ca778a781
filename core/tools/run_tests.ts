import { z } from 'zod';

export const run_testsArgs = z.strictObject({
  preset: z.literal('candidate_tests'),
});
