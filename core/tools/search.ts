import { z } from 'zod';

export const searchArgs = z.strictObject({
  query: z.string().min(1).max(256),
  path: z.string().optional(),
  max_results: z.int().min(1).max(200).optional(),
});
