import { z } from 'zod';

export const show_diffArgs = z.strictObject({});
