import { z } from 'zod';

export const apply_patchArgs = z.strictObject({
  path: z.string(),
  version: z.string().regex(/^([0-9a-f]{64}|absent)$/, 'a lowercase hex SHA-256 digest or "absent"'),
  old: z.string(),
  new: z.string(),
});
