/**
 * Lexical path rules, applied before anything touches the disk. The file-system half
 * (symlinks and hardlinks on the way) lives in workspace/fs-safety.ts.
 */
export const MAX_PATH_BYTES = 1024;
export const MAX_SEGMENT_BYTES = 255;

// Windows device names are reserved with any extension (`aux.txt`), in any case.
const utf8Length = (s: string): number => new TextEncoder().encode(s).length;

const DEVICE_NAME = /^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³]|conin\$|conout\$)(\..*)?$/i;

export type PathCheck = { ok: true; path: string } | { ok: false; reason: string };

/**
 * Normalises a repo-relative, `/`-separated path (`./a//b` -> `a/b`) or says why it is denied.
 * `allowRoot` admits the empty path / `.` meaning the workspace root (for folders).
 */
export function normalizeRepoPath(raw: string, allowRoot = false): PathCheck {
  if (raw.includes('\0')) return { ok: false, reason: 'path contains NUL' };
  if (utf8Length(raw) > MAX_PATH_BYTES) return { ok: false, reason: `path is longer than ${MAX_PATH_BYTES} bytes` };
  if (raw.startsWith('/') || raw.startsWith('\\') || /^[A-Za-z]:/.test(raw)) return { ok: false, reason: 'absolute paths are not allowed' };
  if (raw.includes('\\')) return { ok: false, reason: 'use / as the separator; backslash is not allowed' };
  if (/[\u0001-\u001f\u007f]/.test(raw)) return { ok: false, reason: 'path contains control characters' };
  const segments = raw.split('/').filter((s) => s !== '' && s !== '.');
  for (const segment of segments) {
    if (segment === '..') return { ok: false, reason: 'path contains ..' };
    if (utf8Length(segment) > MAX_SEGMENT_BYTES) return { ok: false, reason: `a path segment is longer than ${MAX_SEGMENT_BYTES} bytes` };
    if (DEVICE_NAME.test(segment)) return { ok: false, reason: `reserved device name ${JSON.stringify(segment)}` };
    if (/[. ]$/.test(segment)) return { ok: false, reason: 'a path segment may not end with a dot or a space' };
  }
  if (segments.length === 0 && !allowRoot) return { ok: false, reason: 'path is empty' };
  return { ok: true, path: segments.join('/') };
}

/**
 * `*` matches within one path segment; `**` as a whole segment matches any number of segments
 * (`src/**` everything below src, `**\/test_*.py` at any depth); every other character is literal.
 * A pattern without `**` matches exactly as it did before `**` existed.
 */
export function globMatches(pattern: string, path: string): boolean {
  const segments = pattern.split('/');
  const source = segments
    .map((segment, i) => {
      const last = i === segments.length - 1;
      if (segment === '**') return last ? '.*' : '(?:[^/]+/)*';
      const literal = segment
        .split('*')
        .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join('[^/]*');
      return last ? literal : `${literal}/`;
    })
    .join('');
  return new RegExp(`^${source}$`).test(path);
}

/**
 * Why `pattern` is not a path pattern this project understands, or null when it is one:
 * repo-relative, `/`-separated, no empty, `.` or `..` segment, `**` only as a whole segment, and
 * none of the glob syntax it does not implement (`?`, `[...]`, `{...}`, `!`), so a pattern never
 * silently means something other than what its author read into it.
 */
export function globProblem(pattern: string): string | null {
  if (pattern === '') return 'a pattern may not be empty';
  if (pattern.includes('\0') || /[\u0001-\u001f\u007f]/.test(pattern)) return 'a pattern may not contain control characters';
  if (pattern.startsWith('/')) return 'a pattern is repo-relative: no leading /';
  if (pattern.includes('\\')) return 'use / as the separator; backslash is not allowed';
  const unsupported = /[?[\]{}!]/.exec(pattern);
  if (unsupported) return `${JSON.stringify(unsupported[0])} is not supported: use * within a segment and ** across segments`;
  for (const segment of pattern.split('/')) {
    if (segment === '') return 'a pattern may not have an empty segment (// or a trailing /)';
    if (segment === '.' || segment === '..') return `a pattern may not have a ${segment} segment`;
    if (segment.includes('**') && segment !== '**') return '** must be a whole path segment (src/**/x.py, not src/**.py)';
  }
  return null;
}
