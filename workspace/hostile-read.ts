/**
 * The one door for files a sandbox or a test process could have made: report files in `/out`,
 * a workspace's files after a test ran, the copies a run keeps of them. Each is opened with
 * `O_RDONLY | O_NOFOLLOW | O_NONBLOCK` after an lstat that says it is a regular file; fstat on
 * that descriptor must say the same file, its size is checked against the cap before a byte is
 * read, and no more than the cap is ever read through it.
 *
 * Hazards:
 * - `statSync` + `readFileSync` follow a link (to a host file, to `/dev/zero`: an endless read)
 *   and block inside `open()` on a FIFO until a writer comes: the whole worker's event loop
 *   stops, heartbeats included, and a process blocked there ignores SIGTERM.
 * - A device is never opened (opening one can have effects of its own): lstat refuses it first.
 * - Only the final component is refused when it is a link; the folders above are the caller's
 *   (a report folder it made, or a workspace path checked from the root, as resolveInWorkspace does).
 */
import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, openSync, readSync, writeSync, type Stats } from 'node:fs';

/** Why a file was not read. */
export type RefusedKind = 'missing' | 'link' | 'fifo' | 'socket' | 'device' | 'folder' | 'too_large';

export type HostileRead = { ok: true; bytes: Buffer } | { ok: false; kind: RefusedKind; detail: string };

const FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** What a non-regular entry is, in words and as a kind. */
function notRegular(stat: Stats): { kind: RefusedKind; what: string } {
  if (stat.isSymbolicLink()) return { kind: 'link', what: 'a symbolic link, not followed' };
  if (stat.isFIFO()) return { kind: 'fifo', what: 'a FIFO, not a regular file' };
  if (stat.isSocket()) return { kind: 'socket', what: 'a socket, not a regular file' };
  if (stat.isDirectory()) return { kind: 'folder', what: 'a folder, not a regular file' };
  return { kind: 'device', what: 'a device, not a regular file' };
}

/**
 * Opens `abs` for reading if it is a regular file and no larger than `capBytes`; returns the
 * descriptor and its size, or why not. The caller closes the descriptor.
 */
function openRegular(abs: string, capBytes: number, name: string): { fd: number; size: number } | Extract<HostileRead, { ok: false }> {
  let before: Stats;
  try {
    before = lstatSync(abs);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { ok: false, kind: 'missing', detail: `${name} does not exist` };
    throw err;
  }
  if (!before.isFile()) {
    const { kind, what } = notRegular(before);
    return { ok: false, kind, detail: `${name} is ${what}` };
  }
  let fd: number;
  try {
    fd = openSync(abs, FLAGS);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Replaced between the lstat and the open: by a link (ELOOP), a socket (ENXIO), or removed.
    if (code === 'ELOOP') return { ok: false, kind: 'link', detail: `${name} is a symbolic link, not followed` };
    if (code === 'ENXIO') return { ok: false, kind: 'socket', detail: `${name} is a socket, not a regular file` };
    if (code === 'ENOENT') return { ok: false, kind: 'missing', detail: `${name} does not exist` };
    throw err;
  }
  const stat = fstatSync(fd);
  if (!stat.isFile() || stat.ino !== before.ino || stat.dev !== before.dev) {
    closeSync(fd);
    const { kind, what } = stat.isFile() ? { kind: 'link' as const, what: 'replaced while it was opened' } : notRegular(stat);
    return { ok: false, kind, detail: `${name} is ${what}` };
  }
  if (stat.size > capBytes) {
    closeSync(fd);
    return { ok: false, kind: 'too_large', detail: `${name} is ${stat.size} bytes, over the cap of ${capBytes}` };
  }
  return { fd, size: stat.size };
}

/**
 * The bytes of a regular file of at most `capBytes`, or why it was not read. `name` is how the
 * file is named in the refusal's detail (never a host path: details reach results and traces).
 * Errors other than the refusals (EACCES, EIO) are thrown: they are the host's, not the file's.
 */
export function readHostile(abs: string, capBytes: number, name: string): HostileRead {
  const opened = openRegular(abs, capBytes, name);
  if ('ok' in opened) return opened;
  try {
    // The file may still grow while it is read (a process that outlived its test): the read
    // goes on to the end of the file, but never past one byte over the cap.
    let buffer = Buffer.allocUnsafe(opened.size + 1);
    let length = 0;
    for (;;) {
      if (length === buffer.length) {
        if (length > capBytes)
          return { ok: false, kind: 'too_large', detail: `${name} grew over the cap of ${capBytes} bytes while it was read` };
        const larger = Buffer.allocUnsafe(Math.min(buffer.length * 2, capBytes + 1));
        buffer.copy(larger, 0, 0, length);
        buffer = larger;
      }
      const n = readSync(opened.fd, buffer, length, buffer.length - length, null);
      if (n === 0) break;
      length += n;
    }
    return { ok: true, bytes: buffer.subarray(0, length) };
  } finally {
    closeSync(opened.fd);
  }
}

/** Reused by every digest: the reads are synchronous, so no two digests share it at once. */
const chunk = Buffer.allocUnsafe(1024 * 1024);

/**
 * The SHA-256 of a regular file, read through one descriptor a chunk at a time (a file of any
 * size costs one chunk of memory), or why it was not read.
 */
export function digestHostile(abs: string, name: string): { ok: true; digest: string } | Extract<HostileRead, { ok: false }> {
  return streamHostile(abs, name, () => undefined);
}

/**
 * Copies a regular file to `to` (created, never an existing file) through one descriptor a chunk
 * at a time, and returns the digest of what was copied; or why it was not read.
 */
export function copyHostile(abs: string, to: string, name: string): { ok: true; digest: string } | Extract<HostileRead, { ok: false }> {
  let out: number | null = null;
  try {
    return streamHostile(
      abs,
      name,
      (bytes) => {
        out ??= openSync(to, 'wx', 0o600);
        for (let off = 0; off < bytes.length;) off += writeSync(out, bytes, off, bytes.length - off);
      },
      () => {
        out ??= openSync(to, 'wx', 0o600);
      },
    );
  } finally {
    if (out !== null) closeSync(out);
  }
}

/**
 * A regular file read through one descriptor a chunk at a time (a file of any size costs one chunk
 * of memory), each chunk handed to `each`, and the SHA-256 of all of them; or why it was not read.
 * `opened` runs once the file is known to be regular, before the first chunk.
 */
function streamHostile(
  abs: string,
  name: string,
  each: (bytes: Buffer) => void,
  opened: () => void = () => undefined,
): { ok: true; digest: string } | Extract<HostileRead, { ok: false }> {
  const file = openRegular(abs, Number.MAX_SAFE_INTEGER, name);
  if ('ok' in file) return file;
  try {
    opened();
    const hash = createHash('sha256');
    for (;;) {
      const n = readSync(file.fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      hash.update(chunk.subarray(0, n));
      each(chunk.subarray(0, n));
    }
    return { ok: true, digest: hash.digest('hex') };
  } finally {
    closeSync(file.fd);
  }
}

/** A read the caller cannot go on without (a file it saw as regular a moment ago): the refusal as an error. */
export class HostileFileError extends Error {
  override name = 'HostileFileError';
  constructor(
    readonly kind: RefusedKind,
    message: string,
  ) {
    super(message);
  }
}

/** `readHostile`, throwing a HostileFileError instead of returning a refusal. */
export function readRegular(abs: string, capBytes: number, name: string): Buffer {
  const read = readHostile(abs, capBytes, name);
  if (!read.ok) throw new HostileFileError(read.kind, read.detail);
  return read.bytes;
}

/** `copyHostile`, throwing a HostileFileError instead of returning a refusal; returns the digest of the copy. */
export function copyRegular(abs: string, to: string, name: string): string {
  const copied = copyHostile(abs, to, name);
  if (!copied.ok) throw new HostileFileError(copied.kind, copied.detail);
  return copied.digest;
}

/** `digestHostile`, throwing a HostileFileError instead of returning a refusal. */
export function digestRegular(abs: string, name: string): string {
  const read = digestHostile(abs, name);
  if (!read.ok) throw new HostileFileError(read.kind, read.detail);
  return read.digest;
}
