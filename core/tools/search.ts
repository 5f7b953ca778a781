import { z } from 'zod';

export const searchArgs = z.strictObject({
  query: z.string().min(1).max(256).describe('Literal text to find (not a regular expression), 1-256 characters.'),
  path: z.string().optional().describe('Repo-relative folder to search in. Default: the whole workspace.'),
  max_results: z.int().min(1).max(200).optional().describe('Maximum number of matching lines, 1-200. Default 50.'),
});

export const searchDescription =
  'Find a literal string in the text files of the workspace. Returns matching lines as {path, line, text}, sorted by ' +
  'path and line, and `skipped`: files that were not searched (binary, not UTF-8, too large).';
