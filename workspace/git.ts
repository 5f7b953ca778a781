/**
 * A git repository as a source of work and the place a verified change goes back to, driven
 * through plumbing only, through a `GitRunner`: the machine's own git for a repository the user
 * trusts (`hostGit`), or git inside a container for every other (sandbox/git-sandbox.ts). The
 * same code reads and writes through either; what a runner hands back is read as hostile.
 *
 * Reading: `rev-parse`, `ls-tree` and `cat-file --batch`, each streamed and bounded while it
 * streams, in time linear in what it reads: the listing's entries counted and their length
 * bounded here, each one checked against `RepositoryLimits` (files, bytes, one blob, path length
 * and depth) by `ListingReader` in a workspace thread (workspace/listing.ts). A change is built
 * in a scratch repository that borrows the repository's objects as an alternate (`git
 * fast-import` from the base commit), so building it reads no setting of the repository and
 * writes nothing to it; a branch then takes that change's objects as a pack
 * (`unpack-objects`) and one `update-ref` whose expected old value is the null id, with the
 * machine's git.
 *
 * Hazards: a repository is configured by whoever wrote its `.git`, and git runs commands and
 * opens connections from configuration. The sandbox is the wall that holds whatever setting
 * nobody has listed (no network, no secret, nothing of the host but the read-only repository).
 * The hardened environment of every command is a second wall: no user or system configuration,
 * command-line settings that beat the repository's for the programs git is known to run, no
 * transport at all (`GIT_ALLOW_PROTOCOL` empty beats every per-protocol setting), no lazy fetch,
 * and a repository that needs a promisor remote (a partial clone) is refused. Every command has an
 * idle and a total time limit, and a repository whose reading stalls (a FIFO where git reads) is
 * refused when the idle limit passes.
 */
import { spawn } from 'node:child_process';
import { lstatSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { limitName, type RepositoryLimits } from '../core/limits';
import type { ChangeEntryWithBytes, VerifiedChange } from './verified-change';

export { DEFAULT_REPOSITORY_LIMITS, type RepositoryLimits } from '../core/limits';

export type GitErrorKind =
  | 'not_a_repository'
  | 'unknown_ref'
  | 'git_missing'
  | 'ref_exists'
  | 'bad_ref_name'
  /** Over one of the operator's repository limits; the message names it. */
  | 'too_large'
  /** Something the harness will not read: a promisor remote, objects outside the folder. */
  | 'unsupported'
  /** A command that said nothing for the idle limit, or ran past the total one. */
  | 'timeout'
  | 'failed';

export class GitError extends Error {
  override name = 'GitError';
  constructor(
    readonly kind: GitErrorKind,
    message: string,
  ) {
    super(message);
  }
}

/** One entry of a tree, as `ls-tree -r -l` lists it. */
export interface TreeEntry {
  /** `100644`, `100755`, `120000` (symlink) or `160000` (a submodule's commit). */
  mode: string;
  type: 'blob' | 'commit' | 'tree';
  oid: string;
  /** Bytes of a blob; 0 for a submodule. */
  size: number;
  path: string;
}

/** What an entry is in a workspace: a regular file, a link, or nothing (a submodule). */
export function entryKind(e: TreeEntry): 'file' | 'link' | null {
  if (e.type !== 'blob') return null;
  if (e.mode === '100644' || e.mode === '100755') return 'file';
  return e.mode === '120000' ? 'link' : null;
}

/** How one command is fed and read. */
export interface GitIO {
  input?: Buffer | string;
  /** Each chunk of stdout as it comes; a returned promise holds the output until it settles; a throw stops the command. */
  onStdout?: (chunk: Buffer) => void | Promise<void>;
  /** Variables for this command only (paths as the runner's commands see them). */
  env?: Record<string, string>;
  /** Run in the repository folder (for discovery) rather than a neutral one. */
  inRepository?: boolean;
  /** Milliseconds without output before the command is stopped; null: only the total limit. */
  idleMs?: number | null;
  /** Bytes of stdout kept when there is no `onStdout`. */
  maxOutput?: number;
}

/** Where git commands on one repository run. */
export interface GitRunner {
  readonly kind: 'host' | 'sandbox';
  /** The repository folder as the runner's commands see it. */
  readonly root: string;
  /** Runs `git args`; resolves with stdout (empty with `onStdout`) when it exits 0, else a GitError. */
  git(args: string[], io?: GitIO): Promise<Buffer>;
  /** A new empty folder for a scratch repository, as the commands see it. */
  scratch(): Promise<string>;
  close(): Promise<void>;
}

/**
 * Command-line configuration (which beats the repository's): nothing the repository configured
 * runs, should a command reach it. Signing off; hooks from nowhere; no fsmonitor; the credential
 * helper list emptied and no askpass; no transport; `cat` and `:` are git's words for no pager and
 * no editor. External diff, text conversion and filters run only where a command asks for them:
 * `diff-tree` gets `--no-ext-diff --no-textconv`, and `cat-file`, `fast-import` and `ls-tree`
 * never filter.
 */
export const GIT_CONFIG_OVERRIDES: readonly (readonly [string, string])[] = [
  ['commit.gpgSign', 'false'],
  ['tag.gpgSign', 'false'],
  ['core.hooksPath', '/dev/null'],
  ['core.fsmonitor', 'false'],
  ['core.sshCommand', 'false'],
  ['core.pager', 'cat'],
  ['core.editor', ':'],
  ['core.askPass', ''],
  ['credential.helper', ''],
  ['protocol.allow', 'never'],
  ['fetch.recurseSubmodules', 'false'],
  ['submodule.recurse', 'false'],
];

/** The variables of every git command: only these, whatever the caller's environment holds. */
export function gitEnv(o: { path: string; safeDirectory?: boolean; extra?: Record<string, string> }): Record<string, string> {
  const overrides = [...GIT_CONFIG_OVERRIDES, ...(o.safeDirectory ? [['safe.directory', '*'] as const] : [])];
  const env: Record<string, string> = {
    PATH: o.path,
    LANG: 'C.UTF-8',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_ATTR_NOSYSTEM: '1',
    GIT_TERMINAL_PROMPT: '0',
    GIT_OPTIONAL_LOCKS: '0',
    GIT_NO_REPLACE_OBJECTS: '1',
    // Empty: no protocol at all, over any `protocol.<name>.allow` of the repository's.
    GIT_ALLOW_PROTOCOL: '',
    GIT_NO_LAZY_FETCH: '1',
    GIT_PAGER: 'cat',
    GIT_EDITOR: ':',
    GIT_CONFIG_COUNT: String(overrides.length),
  };
  overrides.forEach(([key, value], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = key;
    env[`GIT_CONFIG_VALUE_${i}`] = value;
  });
  return { ...env, ...o.extra };
}

/** The last lines of a command's stderr, for an error message. */
const lastLines = (stderr: string) => stderr.trim().split('\n').slice(-3).join(' ');

/** Collects what `io.onStdout` does not take, up to `io.maxOutput` bytes (past it: a `too_large` error). */
export function outputCollector(args: string[], io: GitIO): { take: (chunk: Buffer) => void | Promise<void>; result: () => Buffer } {
  if (io.onStdout) return { take: io.onStdout, result: () => Buffer.alloc(0) };
  const cap = io.maxOutput ?? 64 * 1024 * 1024;
  const chunks: Buffer[] = [];
  let size = 0;
  return {
    take: (chunk) => {
      size += chunk.length;
      if (size > cap) throw new GitError('too_large', `git ${args[0]} printed more than ${cap} bytes`);
      chunks.push(chunk);
    },
    result: () => Buffer.concat(chunks, size),
  };
}

/** The error for a command that exited `code`. */
export function exitError(args: string[], code: number | null, stderr: string): GitError {
  return new GitError('failed', `git ${args[0]} failed (exit ${code ?? 'by signal'}): ${lastLines(stderr)}`);
}

export const idleError = (args: string[], ms: number) =>
  new GitError(
    'timeout',
    `git ${args[0]} read nothing for ${ms / 1000} s (${limitName('idle_s')}): something in the repository's git folder stalls a read (a FIFO, say)`,
  );

/**
 * A command's time limits and its reading: idle counts only while the command owes output (not
 * while the reader holds a chunk, however long it takes), the total from the start. Past either,
 * `onLimit` stops the command.
 */
export class CommandWatch {
  private idle: NodeJS.Timeout | undefined;
  private readonly total: NodeJS.Timeout;
  private failure: Error | null = null;

  constructor(
    private readonly args: string[],
    private readonly idleMs: number | null,
    totalMs: number,
    private readonly onLimit: (err: Error) => void,
  ) {
    this.total = setTimeout(() => this.fail(new GitError('timeout', `git ${args[0]} ran past ${totalMs / 1000} s`)), totalMs);
    this.alive();
  }

  /** The command said something: its idle time starts again. */
  alive(): void {
    if (this.idleMs === null || this.failure) return;
    clearTimeout(this.idle);
    this.idle = setTimeout(() => this.fail(idleError(this.args, this.idleMs!)), this.idleMs);
  }

  fail(err: Error): void {
    this.failure ??= err;
    this.onLimit(err);
  }

  /**
   * Reads `stream` to its end into `out`, one chunk at a time: the next chunk is read once the
   * reader has taken this one, so a reader that writes what it reads holds the command back.
   */
  async read(stream: AsyncIterable<Buffer>, out: ReturnType<typeof outputCollector>): Promise<Buffer> {
    try {
      for await (const chunk of stream) {
        if (this.failure) break;
        clearTimeout(this.idle);
        await out.take(chunk);
        this.alive();
      }
    } catch (err) {
      this.fail(err as Error);
    }
    return out.result();
  }

  stop(): void {
    clearTimeout(this.idle);
    clearTimeout(this.total);
  }
}

/**
 * The machine's git, for a repository the user trusts: spawned asynchronously in the hardened
 * environment, each command with the idle limit and `totalMs`, killed when it passes one.
 */
export function hostGit(path: string, o: { path: string; idleMs: number; totalMs: number }): GitRunner {
  const root = resolve(path);
  const scratches: string[] = [];
  return {
    kind: 'host',
    root,
    git: async (args, io = {}) => {
      const child = spawn('git', args, {
        env: gitEnv({ path: o.path, extra: io.env }),
        cwd: io.inRepository ? root : tmpdir(),
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let failed: Error | null = null;
      const watch = new CommandWatch(args, io.idleMs === undefined ? o.idleMs : io.idleMs, o.totalMs, (err) => {
        failed ??= err;
        child.kill('SIGKILL');
      });
      const closed = new Promise<number | null>((resolveClosed) => {
        child.on('close', resolveClosed);
        child.on('error', (err: NodeJS.ErrnoException) => {
          watch.fail(
            err.code === 'ENOENT'
              ? new GitError('git_missing', 'git is not installed on this machine (it is needed to read and write repositories)')
              : err,
          );
          resolveClosed(null);
        });
      });
      let stderr = '';
      child.stderr.on('data', (c: Buffer) => {
        watch.alive();
        if (stderr.length < 64 * 1024) stderr += c.toString('utf8');
      });
      child.stdin.on('error', () => undefined); // a child that died first is reported by 'close'
      child.stdin.end(io.input ?? '');
      const out = await watch.read(child.stdout, outputCollector(args, io));
      const code = await closed;
      watch.stop();
      if (failed) throw failed;
      if (code !== 0) throw exitError(args, code, stderr);
      return out;
    },
    scratch: async () => {
      const dir = mkdtempSync(resolve(tmpdir(), 'agent-git-'));
      scratches.push(dir);
      return dir;
    },
    close: async () => {
      for (const dir of scratches.splice(0)) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Splits a stream into records ending in `separator`, in time linear in its length: a record
 * longer than `maxRecord` is an error, so a stream without separators cannot grow a buffer.
 */
export class RecordSplitter {
  private parts: Buffer[] = [];
  private size = 0;
  constructor(
    private readonly separator: number,
    private readonly maxRecord: number,
    private readonly tooLong: () => Error,
  ) {}

  /** The records completed by `chunk`. */
  push(chunk: Buffer): Buffer[] {
    const records: Buffer[] = [];
    let start = 0;
    for (let at = chunk.indexOf(this.separator); at >= 0; at = chunk.indexOf(this.separator, start)) {
      const piece = chunk.subarray(start, at);
      records.push(this.parts.length === 0 ? piece : Buffer.concat([...this.parts, piece], this.size + piece.length));
      this.parts = [];
      this.size = 0;
      start = at + 1;
    }
    if (start < chunk.length) {
      this.size += chunk.length - start;
      if (this.size > this.maxRecord) throw this.tooLong();
      this.parts.push(chunk.subarray(start));
    }
    return records;
  }

  get pending(): boolean {
    return this.size > 0;
  }
}

/**
 * Reads `cat-file --batch` output: a header line, then exactly the announced bytes and a newline.
 * Each object is copied once into a buffer of its size, so reading is linear in the bytes.
 */
class BlobStream {
  private header = new RecordSplitter(0x0a, 512, () => new GitError('failed', 'git cat-file printed a header longer than 512 bytes'));
  private want: { oid: string; bytes: Buffer; filled: number } | null = null;
  private trailer = false;

  constructor(
    private readonly maxBlob: number,
    private readonly onBlob: (oid: string, bytes: Buffer) => void | Promise<void>,
  ) {}

  async push(chunk: Buffer): Promise<void> {
    let at = 0;
    while (at < chunk.length) {
      if (this.trailer) {
        if (chunk[at] !== 0x0a) throw new GitError('failed', 'git cat-file: an object did not end where its size said');
        this.trailer = false;
        at++;
        continue;
      }
      if (this.want === null) {
        const nl = chunk.indexOf(0x0a, at);
        const records = this.header.push(chunk.subarray(at, nl < 0 ? chunk.length : nl + 1));
        at = nl < 0 ? chunk.length : nl + 1;
        if (records.length === 0) continue;
        const fields = records[0].toString('utf8').split(' ');
        if (fields[1] === 'missing' || fields.length !== 3)
          throw new GitError('failed', `object ${fields[0]} is missing from the repository (or is not what the tree says)`);
        const size = Number(fields[2]);
        if (!Number.isSafeInteger(size) || size < 0) throw new GitError('failed', `git cat-file announced a size of ${fields[2]}`);
        if (size > this.maxBlob)
          throw new GitError('too_large', `a file of the base tree has ${size} bytes, over ${this.maxBlob} (${limitName('blob_bytes')})`);
        this.want = { oid: fields[0], bytes: Buffer.allocUnsafe(size), filled: 0 };
      }
      const want = this.want;
      const n = Math.min(want.bytes.length - want.filled, chunk.length - at);
      chunk.copy(want.bytes, want.filled, at, at + n);
      want.filled += n;
      at += n;
      if (want.filled === want.bytes.length) {
        this.want = null;
        this.trailer = true;
        await this.onBlob(want.oid, want.bytes);
      }
    }
  }

  get done(): boolean {
    return this.want === null && !this.trailer && !this.header.pending;
  }
}

/** A path of a tree as fast-import reads it: C-quoted, so any byte but NUL is taken as it is. */
function quotePath(path: string): string {
  const escaped = path.replace(/[\\"\x00-\x1f\x7f]/g, (c) =>
    c === '\\' || c === '"' ? `\\${c}` : `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`,
  );
  return `"${escaped}"`;
}

/** The longest record a tree listing may hold: a path at the limit and its entry's fields. */
const maxListingRecord = (l: RepositoryLimits) => l.path_bytes + 256;
const pathTooLong = (l: RepositoryLimits) =>
  new GitError('too_large', `a path of the base tree is longer than ${l.path_bytes} bytes (${limitName('path_bytes')})`);
const tooManyFiles = (l: RepositoryLimits) =>
  new GitError('too_large', `the base tree has more than ${l.files} files (${limitName('files')})`);

/**
 * Reads the records of `ls-tree -r -z -l` (each without its NUL), in order, as entries checked
 * against the limits together with the entries before them: the first over one is a `too_large`
 * GitError naming it, and a record that is no entry is `failed`.
 */
export class ListingReader {
  private count = 0;
  private bytes = 0;
  constructor(private readonly limits: RepositoryLimits) {}

  entry(record: Buffer): TreeEntry {
    const l = this.limits;
    const tab = record.indexOf(0x09);
    const [mode, type, oid, sizeText] = record.subarray(0, tab).toString('latin1').split(/ +/);
    const path = record.subarray(tab + 1).toString('utf8');
    if (tab < 0 || !/^[0-7]{6}$/.test(mode) || !['blob', 'commit', 'tree'].includes(type) || !/^[0-9a-f]{40,64}$/.test(oid))
      throw new GitError('failed', 'git ls-tree printed a line that is not an entry');
    const size = sizeText === '-' ? 0 : Number(sizeText);
    if (++this.count > l.files) throw tooManyFiles(l);
    if (record.length - tab - 1 > l.path_bytes) throw pathTooLong(l);
    if (path.split('/').length - 1 > l.depth)
      throw new GitError('too_large', `a path of the base tree is more than ${l.depth} folders deep (${limitName('depth')})`);
    if (type === 'blob' && size > l.blob_bytes)
      throw new GitError(
        'too_large',
        `${JSON.stringify(path)} in the base tree has ${size} bytes, over ${l.blob_bytes} (${limitName('blob_bytes')})`,
      );
    this.bytes += type === 'blob' ? size : 0;
    if (this.bytes > l.bytes)
      throw new GitError('too_large', `the base tree's files hold more than ${l.bytes} bytes (${limitName('bytes')})`);
    return { mode, type: type as TreeEntry['type'], oid, size, path };
  }
}

export class GitRepository {
  private constructor(
    readonly runner: GitRunner,
    /** The repository's git folder as the runner sees it. */
    readonly gitDir: string,
    readonly bare: boolean,
    readonly limits: RepositoryLimits,
  ) {}

  /**
   * A folder with `.git`, or a bare repository, read through `runner`; anything else is
   * `not_a_repository`, and a partial clone (a promisor remote) is `unsupported`.
   */
  static async open(runner: GitRunner, hostPath: string, limits: RepositoryLimits): Promise<GitRepository> {
    requireFolder(hostPath);
    const hasDotGit = lstatSync(resolve(hostPath, '.git'), { throwIfNoEntry: false }) !== undefined;
    let repo: GitRepository | null = null;
    try {
      if (hasDotGit) {
        // Discovery starts in the folder itself, which holds .git: it cannot find an enclosing repository.
        const gitDir = (await runner.git(['rev-parse', '--absolute-git-dir'], { inRepository: true })).toString('utf8').trim();
        repo = new GitRepository(runner, gitDir, false, limits);
      } else {
        const bare = await runner.git(['rev-parse', '--is-bare-repository'], { env: { GIT_DIR: runner.root } });
        if (bare.toString('utf8').trim() === 'true') repo = new GitRepository(runner, runner.root, true, limits);
      }
    } catch (err) {
      if (err instanceof GitError && (err.kind === 'git_missing' || err.kind === 'timeout')) throw err;
      if (hasDotGit) throw new GitError('not_a_repository', `${hostPath} is not a git repository (its .git is not one${reason(err)})`);
    }
    if (repo === null)
      throw new GitError('not_a_repository', `${hostPath} is not a git repository (no .git folder, and not a bare repository)`);
    await repo.refusePromisor();
    return repo;
  }

  private git(args: string[], io: GitIO = {}): Promise<Buffer> {
    return this.runner.git(args, { ...io, env: { GIT_DIR: this.gitDir, ...io.env } });
  }

  /** A partial clone fetches what it lacks from a remote when it is read: never done here, so refused. */
  private async refusePromisor(): Promise<void> {
    let found = '';
    try {
      found = (await this.git(['config', '--get-regexp', '^(extensions\\.partialclone|remote\\..*\\.promisor)$'])).toString('utf8');
    } catch (err) {
      if (!(err instanceof GitError && err.kind === 'failed' && /exit 1\b/.test(err.message))) throw err; // exit 1: no such setting
    }
    const promisor = found.split('\n').filter((line) => /^(extensions\.partialclone \S|remote\..*\.promisor (true|yes|on|1)$)/i.test(line));
    if (promisor.length > 0)
      throw new GitError(
        'unsupported',
        `the repository is a partial clone (${promisor[0].split(' ')[0]}): reading it would fetch from a remote, which is never done here; give a complete clone`,
      );
  }

  /** The commit `ref` names (a branch, tag, commit id, `HEAD~2`...), as a full id. */
  async resolveCommit(ref: string): Promise<string> {
    if (ref === '' || ref.startsWith('-') || /[\0\n]/.test(ref)) throw new GitError('unknown_ref', `unknown ref ${JSON.stringify(ref)}`);
    let out: string;
    try {
      out = (await this.git(['rev-parse', '--verify', '--quiet', '--end-of-options', `${ref}^{commit}`])).toString('utf8').trim();
    } catch (err) {
      if (err instanceof GitError && err.kind === 'failed')
        throw new GitError('unknown_ref', `unknown ref ${JSON.stringify(ref)}: no commit of that name`);
      throw err;
    }
    if (!/^([0-9a-f]{40}|[0-9a-f]{64})$/.test(out))
      throw new GitError('failed', `git rev-parse answered ${JSON.stringify(out.slice(0, 80))}`);
    return out;
  }

  /**
   * A commit's tree listing (`ls-tree -r -z -l`) as bytes, for a workspace thread to judge
   * (`readListing`) or plan an import from (`planImport`). Only what costs nothing per entry is
   * done here: the records are counted (the first past the files limit stops the command) and
   * none may be longer than a path allows, so what is held is bounded by the limits before
   * anything is parsed.
   */
  async listing(commit: string): Promise<Uint8Array> {
    const l = this.limits;
    const max = maxListingRecord(l);
    const chunks: Buffer[] = [];
    let [size, records, open] = [0, 0, 0];
    await this.git(['ls-tree', '-r', '-z', '-l', '--full-tree', commit], {
      onStdout: (chunk) => {
        let start = 0;
        for (let at = chunk.indexOf(0); at >= 0; at = chunk.indexOf(0, start)) {
          if (open + at - start > max) throw pathTooLong(l);
          if (++records > l.files) throw tooManyFiles(l);
          [open, start] = [0, at + 1];
        }
        open += chunk.length - start;
        if (open > max) throw pathTooLong(l);
        chunks.push(chunk);
        size += chunk.length;
      },
    });
    if (open > 0) throw new GitError('failed', 'git ls-tree ended in the middle of an entry');
    const bytes = new Uint8Array(size);
    let at = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, at);
      at += chunk.length;
    }
    return bytes;
  }

  /** One blob's bytes. */
  async readBlob(oid: string): Promise<Buffer> {
    let found: Buffer | null = null;
    await this.readBlobs([oid], (_oid, bytes) => {
      found = bytes;
    });
    return found!;
  }

  /**
   * Streams the blobs `oids` through one `cat-file --batch`, calling `onBlob` for each in order
   * (its promise holds the stream); a missing object is an error, never an empty file.
   */
  readBlobs(oids: string[], onBlob: (oid: string, bytes: Buffer) => void | Promise<void>): Promise<void> {
    return this.readBlobStream(Buffer.from(oids.map((o) => `${o}\n`).join('')), oids.length, onBlob);
  }

  /** `readBlobs` of `count` blobs whose ids `input` lists, one a line (as a workspace thread planned them). */
  async readBlobStream(input: Uint8Array, count: number, onBlob: (oid: string, bytes: Buffer) => void | Promise<void>): Promise<void> {
    if (count === 0) return;
    let read = 0;
    const stream = new BlobStream(this.limits.blob_bytes, (oid, bytes) => {
      read++;
      return onBlob(oid, bytes);
    });
    await this.git(['cat-file', '--batch'], {
      input: Buffer.from(input.buffer, input.byteOffset, input.byteLength),
      onStdout: (chunk) => stream.push(chunk),
    });
    if (!stream.done || read !== count) throw new GitError('failed', 'git cat-file ended in the middle of an object');
  }

  private objects: Promise<string> | null = null;

  /** The repository's object folder as the runner sees it (a worktree's are the main repository's). */
  private objectsPath(): Promise<string> {
    this.objects ??= this.git(['rev-parse', '--git-path', 'objects']).then((out) => {
      const path = out.toString('utf8').trim();
      return path.startsWith('/') ? path : `${this.gitDir}/${path}`;
    });
    return this.objects;
  }

  /** A setting of the repository's own configuration, or null. */
  private async config(key: string): Promise<string | null> {
    try {
      return (await this.git(['config', '--get', key])).toString('utf8').trim() || null;
    } catch {
      return null;
    }
  }

  /** The committer the repository's configuration names, or the harness's; never a line break. */
  private async identity(): Promise<string> {
    const clean = (s: string | null) => (s ?? '').replace(/[<>\n\0]/g, '').trim();
    const name = clean(await this.config('user.name')) || 'coding-agent';
    const email = clean(await this.config('user.email')) || 'coding-agent@localhost';
    return `${name} <${email}>`;
  }

  /**
   * The commit of the base commit's tree plus the change (parent the base commit), built by
   * fast-import in a scratch repository whose only objects of its own are the change's. Returns
   * the scratch repository (for `pack` or `diff`) and the ids.
   */
  async buildChange(
    change: VerifiedChange<ChangeEntryWithBytes>,
    message: string,
  ): Promise<{ scratch: string; commit: string; tree: string }> {
    const { base_commit: base, changes } = change;
    const objects = await this.objectsPath();
    const scratch = await this.runner.scratch();
    const format = base.length === 64 ? 'sha256' : 'sha1';
    await this.runner.git(['init', '-q', '--bare', `--object-format=${format}`, '--template=', scratch]);
    const env = { GIT_DIR: scratch, GIT_ALTERNATE_OBJECT_DIRECTORIES: objects };
    const who = await this.identity();
    const parts: Buffer[] = [];
    const data = (bytes: Buffer) => parts.push(Buffer.from(`data ${bytes.length}\n`), bytes, Buffer.from('\n'));
    parts.push(Buffer.from(`commit refs/heads/change\nauthor ${who} now\ncommitter ${who} now\n`));
    data(Buffer.from(message, 'utf8'));
    parts.push(Buffer.from(`from ${base}\n`));
    // Deletions first, so a file may take the place of a folder it replaced and the other way round.
    for (const c of changes) if (c.kind === 'deleted') parts.push(Buffer.from(`D ${quotePath(c.path)}\n`));
    for (const c of changes) {
      if (c.kind === 'deleted') continue;
      const mode = c.kind === 'symlink' ? '120000' : c.executable ? '100755' : '100644';
      parts.push(Buffer.from(`M ${mode} inline ${quotePath(c.path)}\n`));
      data(c.kind === 'symlink' ? Buffer.from(c.target, 'utf8') : c.bytes);
    }
    parts.push(Buffer.from('done\n'));
    await this.runner.git(['fast-import', '--quiet', '--done', '--date-format=now'], { env, input: Buffer.concat(parts), idleMs: null });
    const ids = (await this.runner.git(['rev-parse', 'refs/heads/change', 'refs/heads/change^{tree}'], { env }))
      .toString('utf8')
      .split('\n');
    return { scratch, commit: ids[0], tree: ids[1] };
  }

  /** The objects of a built change that `base` lacks, as one pack (at most `maxBytes`). */
  async packChange(scratch: string, base: string, commit: string, maxBytes: number): Promise<Buffer> {
    const objects = await this.objectsPath();
    return this.runner.git(['pack-objects', '--stdout', '--revs', '-q'], {
      env: { GIT_DIR: scratch, GIT_ALTERNATE_OBJECT_DIRECTORIES: objects },
      input: `${commit}\n^${base}\n`,
      maxOutput: maxBytes,
      idleMs: null,
    });
  }

  /** The change as a patch for `git apply`: built in a scratch repository (the repository gets nothing), diffed with full ids and binary hunks. */
  async patch(change: VerifiedChange<ChangeEntryWithBytes>, message: string): Promise<string> {
    const built = await this.buildChange(change, message);
    const objects = await this.objectsPath();
    const out = await this.runner.git(
      [
        'diff-tree',
        '-r',
        '-p',
        '--binary',
        '--full-index',
        '--no-renames',
        '--no-ext-diff',
        '--no-textconv',
        '--no-color',
        '--src-prefix=a/',
        '--dst-prefix=b/',
        change.base_commit,
        built.tree,
      ],
      {
        env: { GIT_DIR: built.scratch, GIT_ALTERNATE_OBJECT_DIRECTORIES: objects },
        maxOutput: 512 * 1024 * 1024,
      },
    );
    return out.toString('utf8');
  }
}

/** A GitError unless `hostPath` is a folder (checked before a runner is opened on it). */
export function requireFolder(hostPath: string): void {
  const st = lstatSync(hostPath, { throwIfNoEntry: false });
  if (st === undefined || !st.isDirectory()) throw new GitError('not_a_repository', `${hostPath} is not a git repository (no such folder)`);
}

const reason = (err: unknown) => (err instanceof GitError && err.message ? `: ${err.message}` : '');

/**
 * The machine's git on the user's own repository, for what `branch` writes there: the change's
 * objects from a pack, then one ref. Runs nothing the repository configured (the hardened
 * environment), bounded in time like every command.
 */
export class RepositoryWriter {
  constructor(
    private readonly runner: GitRunner,
    private readonly gitDir: string,
  ) {}

  static async open(runner: GitRunner, limits: RepositoryLimits, hostPath: string): Promise<RepositoryWriter> {
    const repo = await GitRepository.open(runner, hostPath, limits);
    return new RepositoryWriter(runner, repo.gitDir);
  }

  private git(args: string[], io: GitIO = {}): Promise<Buffer> {
    return this.runner.git(args, { ...io, env: { GIT_DIR: this.gitDir, ...io.env } });
  }

  /** `refs/heads/<name>` for a valid branch name, or a `bad_ref_name` error. */
  async branchRef(name: string): Promise<string> {
    const bad = new GitError('bad_ref_name', `${JSON.stringify(name)} is not a valid branch name`);
    if (name.startsWith('-') || /[\0\n]/.test(name)) throw bad;
    try {
      await this.runner.git(['check-ref-format', '--branch', name]);
    } catch (err) {
      if (err instanceof GitError && err.kind === 'failed') throw bad;
      throw err;
    }
    return `refs/heads/${name}`;
  }

  /** True when the full ref name exists. */
  async refExists(ref: string): Promise<boolean> {
    try {
      await this.git(['rev-parse', '--verify', '--quiet', '--end-of-options', ref]);
      return true;
    } catch (err) {
      if (err instanceof GitError && err.kind === 'failed') return false;
      throw err;
    }
  }

  /** Writes the objects of `pack` into the repository; each is checked against its id as it is unpacked. */
  async unpack(pack: Buffer): Promise<void> {
    await this.git(['unpack-objects', '-q', '--strict'], { input: pack, idleMs: null });
  }

  /**
   * Creates branch `name` at `commit`, only if it does not exist: one update-ref whose expected
   * old value is the null id, so a branch created meanwhile is never overwritten.
   */
  async createBranch(name: string, commit: string, reasonText: string): Promise<string> {
    const ref = await this.branchRef(name);
    const exists = () => new GitError('ref_exists', `branch ${name} exists already; choose another name with --name`);
    if (await this.refExists(ref)) throw exists();
    try {
      await this.git(['update-ref', '-m', reasonText, ref, commit, '0'.repeat(commit.length)]);
    } catch (err) {
      if (err instanceof GitError && (await this.refExists(ref))) throw exists();
      throw err;
    }
    return ref;
  }
}

/**
 * The change as branch `name` of the repository: its commit and objects built where `repo` reads
 * (a container for a repository not trusted), then written by `writer` (the machine's git), which
 * checks each object against its id. The name is checked before anything is written.
 */
export async function commitToBranch(
  repo: GitRepository,
  writer: RepositoryWriter,
  branch: { change: VerifiedChange<ChangeEntryWithBytes>; message: string; name: string; reason: string; maxPackBytes: number },
): Promise<{ ref: string; commit: string }> {
  const ref = await writer.branchRef(branch.name);
  if (await writer.refExists(ref))
    throw new GitError('ref_exists', `branch ${branch.name} exists already; choose another name with --name`);
  const built = await repo.buildChange(branch.change, branch.message);
  await writer.unpack(await repo.packChange(built.scratch, branch.change.base_commit, built.commit, branch.maxPackBytes));
  await writer.createBranch(branch.name, built.commit, branch.reason);
  return { ref, commit: built.commit };
}
