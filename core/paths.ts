/**
 * Lexical path rules, applied before anything touches the disk. The file-system half
 * (symlinks and hardlinks on the way) lives in activities/fs-safety.ts.
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

/** `*` matches within one path segment; every other character is literal. */
export function globMatches(pattern: string, path: string): boolean {
  const source = pattern
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('[^/]*');
  return new RegExp(`^${source}$`).test(path);
}
