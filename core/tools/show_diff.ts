import { z } from 'zod';

export const show_diffArgs = z.strictObject({});

export const show_diffDescription =
  'Show the unified diff of the workspace against the starting repository, and the sorted list of changed paths.';
