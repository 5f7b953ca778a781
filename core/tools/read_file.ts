import { z } from 'zod';

export const readFileArgs = z
  .strictObject({
    path: z.string().describe('Repo-relative path of the file, `/`-separated.'),
    start: z.int().min(1).optional().describe('First line to return (1-based). Default 1.'),
    end: z.int().min(1).optional().describe('Last line to return (inclusive). Default: the last line.'),
  })
  .refine((a) => a.start === undefined || a.end === undefined || a.end >= a.start, {
    message: 'end must be >= start',
    path: ['end'],
  });

export const readFileDescription =
  'Read a text file of the workspace, optionally a line range. Returns the text, the total number of lines and ' +
  '`version`, the digest of the whole file: pass it to apply_patch. Long results are cut at whole lines (`truncated`).';
