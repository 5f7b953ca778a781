import { z } from 'zod';

export const apply_patchArgs = z.strictObject({
  path: z.string().describe('Repo-relative path of the file to change or create.'),
  version: z
    .string()
    .regex(/^([0-9a-f]{64}|absent)$/, 'a lowercase hex SHA-256 digest or "absent"')
    .describe('The `version` read_file returned for this file, or "absent" to create a new file.'),
  old: z.string().describe('Exact text to replace; it must occur exactly once. Empty when creating a file.'),
  new: z.string().describe('Replacement text (the whole content when creating a file).'),
});

export const apply_patchDescription =
  'Replace the single occurrence of `old` with `new` in a file, or create a file (version "absent", old ""). ' +
  'Each write waits for a human approval. Only writable files may change and only allowed new files may be created.';
