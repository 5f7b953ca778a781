import { z } from 'zod';

export const readFileArgs = z
  .strictObject({
    path: z.string(),
    start: z.int().min(1).optional(),
    end: z.int().min(1).optional(),
  })
  .refine((a) => a.start === undefined || a.end === undefined || a.end >= a.start, {
    message: 'end must be >= start',
    path: ['end'],
  });
