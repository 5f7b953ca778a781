/**
 * A git repository as a source of work and the place a verified change goes back to, driven
 * through plumbing only: `rev-parse`, `ls-tree`, `cat-file`, and for a change `hash-object`,
 * `read-tree` / `update-index` / `write-tree` on a temporary index, `commit-tree`, and one
 * `update-ref` with the expected old value. Nothing here touches a working tree, the repository's
 * index, HEAD or a ref other than the one `createBranch` creates.
 *
 * Hazards: a user's repository is configured by whoever wrote its `.git/config` (and a user's
 * own files add signing, pagers, helpers), and git runs commands from configuration: signing
 * programs (`gpg.program`, `gpg.ssh.defaultKeyCommand`), hooks, `core.fsmonitor`, filters,
 * external diff and text conversion, credential helpers, `core.sshCommand`, a pager or an editor.
 * Every invocation goes through `gitEnv`: the user's and the system's files are not read, none of
 * the caller's GIT_* variables is kept (a GIT_INDEX_FILE or GIT_WORK_TREE inherited from a hook
 * would redirect it), and command-line configuration (which beats the repository's) turns each of
 * those off; commit-tree also gets `--no-gpg-sign`. Replace refs are ignored, so a commit's tree
 * is the one its id names. Objects for a patch go to a temporary object folder with the
 * repository's objects as an alternate, so the repository gets nothing.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export type GitErrorKind = 'not_a_repository' | 'unknown_ref' | 'git_missing' | 'ref_exists' | 'bad_ref_name' | 'failed';

export class GitError extends Error {
  override name = 'GitError';
  constructor(
    readonly kind: GitErrorKind,
    message: string,
  ) {
    super(message);
  }
}

/** One entry of a tree, as `ls-tree -r` lists it. */
export interface TreeEntry {
  /** `100644`, `100755`, `120000` (symlink) or `160000` (a submodule's commit). */
  mode: string;
  type: 'blob' | 'commit' | 'tree';
  oid: string;
  path: string;
}

/** A change to a tree: a file (its bytes), a symlink (its target), or a deletion. */
export type TreeChange =
  | { path: string; kind: 'file'; executable: boolean; bytes: Buffer }
  | { path: string; kind: 'symlink'; target: string }
  | { path: string; kind: 'deleted' };

const MAX_OUTPUT = 512 * 1024 * 1024;

/**
 * Configuration that beats the repository's (command-line scope): nothing configured runs.
 * Signing off (so no `gpg.*` program or key command); hooks from an empty folder; no fsmonitor;
 * the credential helper list emptied (an empty value resets it) and no askpass; no transport at
 * all, so no ssh command; `cat` and `:` are git's own words for no pager and no editor. External diff, text conversion and filters run only where a command asks
 * for them: `diff-tree` gets `--no-ext-diff --no-textconv`, `hash-object` gets `--no-filters`,
 * and `cat-file`, `read-tree` and `update-index --index-info` never filter.
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
];

/**
 * The environment of every git command on a user's repository: the caller's, minus every GIT_*
 * variable, with the user's and the system's configuration files dropped and GIT_CONFIG_OVERRIDES on top.
 */
export function gitEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('GIT_')));
  GIT_CONFIG_OVERRIDES.forEach(([key, value], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = key;
    env[`GIT_CONFIG_VALUE_${i}`] = value;
  });
  return {
    ...env,
    GIT_CONFIG_COUNT: String(GIT_CONFIG_OVERRIDES.length),
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_ATTR_NOSYSTEM: '1',
    GIT_TERMINAL_PROMPT: '0',
    GIT_OPTIONAL_LOCKS: '0',
    GIT_NO_REPLACE_OBJECTS: '1',
    GIT_PAGER: 'cat',
    GIT_EDITOR: ':',
    ...extra,
  };
}

function git(args: string[], o: { env: NodeJS.ProcessEnv; cwd?: string; input?: Buffer | string }): Buffer {
  try {
    return execFileSync('git', args, {
      env: o.env,
      cwd: o.cwd ?? tmpdir(),
      input: o.input,
      maxBuffer: MAX_OUTPUT,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { status?: number; stderr?: Buffer };
    if (e.code === 'ENOENT')
      throw new GitError('git_missing', 'git is not installed on this machine (it is needed to read and write repositories)');
    const stderr = e.stderr?.toString('utf8').trim() ?? '';
    throw new GitError('failed', `git ${args[0]} failed (exit ${e.status ?? '?'}): ${stderr.split('\n').slice(-3).join(' ')}`);
  }
}

export class GitRepository {
  private constructor(
    /** The repository's git folder (the `.git` folder, a worktree's git folder, or the bare repository). */
    readonly gitDir: string,
    readonly bare: boolean,
  ) {}

  /** A folder with `.git`, or a bare repository; anything else is `not_a_repository`. */
  static open(path: string): GitRepository {
    const abs = resolve(path);
    if (!existsSync(abs) || !statSync(abs).isDirectory())
      throw new GitError('not_a_repository', `${path} is not a git repository (no such folder)`);
    if (existsSync(join(abs, '.git'))) {
      // Discovery starts in the folder itself, which holds .git: it cannot find an enclosing repository.
      try {
        const gitDir = git(['rev-parse', '--absolute-git-dir'], { env: gitEnv(), cwd: abs }).toString('utf8').trim();
        return new GitRepository(gitDir, false);
      } catch (err) {
        if (err instanceof GitError && err.kind === 'git_missing') throw err;
        throw new GitError('not_a_repository', `${path} is not a git repository (its .git is not one)`);
      }
    }
    try {
      const bare = git(['rev-parse', '--is-bare-repository'], { env: gitEnv({ GIT_DIR: abs }) })
        .toString('utf8')
        .trim();
      if (bare === 'true') return new GitRepository(abs, true);
    } catch (err) {
      if (err instanceof GitError && err.kind === 'git_missing') throw err;
    }
    throw new GitError('not_a_repository', `${path} is not a git repository (no .git folder, and not a bare repository)`);
  }

  private env(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
    return gitEnv({ GIT_DIR: this.gitDir, ...extra });
  }

  private run(args: string[], o: { env?: NodeJS.ProcessEnv; input?: Buffer | string } = {}): Buffer {
    return git(args, { env: o.env ?? this.env(), input: o.input });
  }

  /** The commit `ref` names (a branch, tag, commit id, `HEAD~2`...), as a full id. */
  resolveCommit(ref: string): string {
    if (ref === '' || ref.startsWith('-') || /[\0\n]/.test(ref)) throw new GitError('unknown_ref', `unknown ref ${JSON.stringify(ref)}`);
    try {
      return this.run(['rev-parse', '--verify', '--quiet', '--end-of-options', `${ref}^{commit}`])
        .toString('utf8')
        .trim();
    } catch (err) {
      if (err instanceof GitError && err.kind === 'failed')
        throw new GitError('unknown_ref', `unknown ref ${JSON.stringify(ref)}: no commit of that name`);
      throw err;
    }
  }

  /** Every entry of a commit's tree, recursively (trees themselves are not listed). */
  lsTree(commit: string): TreeEntry[] {
    const out = this.run(['ls-tree', '-r', '-z', '--full-tree', commit]);
    const entries: TreeEntry[] = [];
    for (const record of out.toString('utf8').split('\0')) {
      if (record === '') continue;
      const tab = record.indexOf('\t');
      const [mode, type, oid] = record.slice(0, tab).split(' ');
      entries.push({ mode, type: type as TreeEntry['type'], oid, path: record.slice(tab + 1) });
    }
    return entries;
  }

  /** One blob's bytes. */
  readBlob(oid: string): Buffer {
    return this.run(['cat-file', 'blob', oid]);
  }

  /**
   * Streams the blobs `oids` through one `cat-file --batch`, calling `onBlob` for each in order;
   * a missing object is an error, never an empty file.
   */
  readBlobs(oids: string[], onBlob: (oid: string, bytes: Buffer) => void): Promise<void> {
    return new Promise((resolvePromise, reject) => {
      const child = spawn('git', ['cat-file', '--batch'], { env: this.env(), cwd: tmpdir(), stdio: ['pipe', 'pipe', 'pipe'] });
      let pending: Buffer = Buffer.alloc(0);
      let want: { oid: string; size: number } | null = null;
      let failed: Error | null = null;
      let stderr = '';
      const fail = (err: Error) => {
        failed ??= err;
        child.kill('SIGKILL');
      };
      child.stdout.on('data', (chunk: Buffer) => {
        if (failed) return;
        pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
        for (;;) {
          if (want === null) {
            const nl = pending.indexOf(0x0a);
            if (nl < 0) return;
            const header = pending.subarray(0, nl).toString('utf8').split(' ');
            pending = pending.subarray(nl + 1);
            if (header[1] === 'missing' || header.length !== 3)
              return fail(new GitError('failed', `object ${header[0]} is missing from the repository`));
            want = { oid: header[0], size: Number(header[2]) };
          }
          if (pending.length < want.size + 1) return;
          const bytes = Buffer.from(pending.subarray(0, want.size));
          pending = pending.subarray(want.size + 1);
          const { oid } = want;
          want = null;
          try {
            onBlob(oid, bytes);
          } catch (err) {
            return fail(err as Error);
          }
        }
      });
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
      child.on('error', (err: NodeJS.ErrnoException) =>
        fail(err.code === 'ENOENT' ? new GitError('git_missing', 'git is not installed on this machine') : err),
      );
      child.on('close', (code) => {
        if (failed) return reject(failed);
        if (code !== 0) return reject(new GitError('failed', `git cat-file failed (exit ${code}): ${stderr.trim()}`));
        if (want !== null || pending.length > 0) return reject(new GitError('failed', 'git cat-file ended in the middle of an object'));
        resolvePromise();
      });
      child.stdin.on('error', () => undefined); // a child that died first is reported by 'close'
      child.stdin.end(oids.map((o) => `${o}\n`).join(''));
    });
  }

  /** The folder of the repository's objects (a worktree's are the main repository's). */
  objectsDir(): string {
    return resolve(this.gitDir, this.run(['rev-parse', '--git-path', 'objects']).toString('utf8').trim());
  }

  /** True when the full ref name exists. */
  refExists(ref: string): boolean {
    try {
      this.run(['rev-parse', '--verify', '--quiet', '--end-of-options', ref]);
      return true;
    } catch (err) {
      if (err instanceof GitError && err.kind === 'failed') return false;
      throw err;
    }
  }

  /** `refs/heads/<name>` for a valid branch name, or a `bad_ref_name` error. */
  branchRef(name: string): string {
    try {
      this.run(['check-ref-format', '--branch', name]);
    } catch (err) {
      if (err instanceof GitError && err.kind === 'failed')
        throw new GitError('bad_ref_name', `${JSON.stringify(name)} is not a valid branch name`);
      throw err;
    }
    if (name.startsWith('-')) throw new GitError('bad_ref_name', `${JSON.stringify(name)} is not a valid branch name`);
    return `refs/heads/${name}`;
  }

  /** The configured identity, or the harness's when the repository's configuration has none. */
  private identity(): NodeJS.ProcessEnv {
    const get = (key: string) => {
      try {
        return this.run(['config', '--get', key]).toString('utf8').trim() || null;
      } catch {
        return null;
      }
    };
    const name = get('user.name');
    const email = get('user.email');
    const env: NodeJS.ProcessEnv = {};
    if (name === null) env.GIT_AUTHOR_NAME = env.GIT_COMMITTER_NAME = 'coding-agent';
    if (email === null) env.GIT_AUTHOR_EMAIL = env.GIT_COMMITTER_EMAIL = 'coding-agent@localhost';
    return env;
  }

  /**
   * Writes the tree `base`'s tree plus `changes` (on a temporary index) and a commit of it whose
   * parent is `base`; returns both ids. With `objectsDir`, every object goes there instead of the
   * repository (whose objects stay readable as an alternate).
   */
  commitChange(base: string, changes: TreeChange[], message: string, objectsDir?: string): { commit: string; tree: string } {
    const scratch = mkdtempSync(join(tmpdir(), 'agent-git-'));
    if (objectsDir) mkdirSync(objectsDir, { recursive: true });
    try {
      const env = this.env({
        GIT_INDEX_FILE: join(scratch, 'index'),
        ...(objectsDir ? { GIT_OBJECT_DIRECTORY: objectsDir, GIT_ALTERNATE_OBJECT_DIRECTORIES: this.objectsDir() } : {}),
      });
      const hash = (bytes: Buffer) =>
        this.run(['hash-object', '-w', '-t', 'blob', '--no-filters', '--stdin'], { env, input: bytes }).toString('utf8').trim();
      this.run(['read-tree', base], { env });
      const zero = '0'.repeat(base.length);
      const deletions = changes.filter((c) => c.kind === 'deleted').map((c) => `0 ${zero}\t${c.path}\0`);
      const additions = changes.flatMap((c) => {
        if (c.kind === 'file') return [`${c.executable ? '100755' : '100644'} ${hash(c.bytes)}\t${c.path}\0`];
        if (c.kind === 'symlink') return [`120000 ${hash(Buffer.from(c.target))}\t${c.path}\0`];
        return [];
      });
      // Deletions first, so a file may take the place of a folder it replaced and the other way round.
      if (deletions.length) this.run(['update-index', '-z', '--index-info'], { env, input: deletions.join('') });
      if (additions.length) this.run(['update-index', '--add', '--replace', '-z', '--index-info'], { env, input: additions.join('') });
      const tree = this.run(['write-tree'], { env }).toString('utf8').trim();
      const commit = this.run(['commit-tree', '--no-gpg-sign', tree, '-p', base, '-F', '-'], {
        env: { ...env, ...this.identity() },
        input: message,
      })
        .toString('utf8')
        .trim();
      return { commit, tree };
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }

  /**
   * Creates branch `name` at `commit`, only if it does not exist: one update-ref whose expected
   * old value is the null id, so a branch created meanwhile is never overwritten.
   */
  createBranch(name: string, commit: string, reason: string): string {
    const ref = this.branchRef(name);
    if (this.refExists(ref)) throw new GitError('ref_exists', `branch ${name} exists already; choose another name with --name`);
    try {
      this.run(['update-ref', '-m', reason, ref, commit, '0'.repeat(commit.length)]);
    } catch (err) {
      if (err instanceof GitError && this.refExists(ref))
        throw new GitError('ref_exists', `branch ${name} exists already; choose another name with --name`);
      throw err;
    }
    return ref;
  }

  /**
   * The change as a patch for `git apply`: the commit is built in a temporary object folder (the
   * repository gets nothing) and diffed against `base` with full ids and binary hunks.
   */
  patch(base: string, changes: TreeChange[], message: string): string {
    const scratch = mkdtempSync(join(tmpdir(), 'agent-git-objects-'));
    try {
      const objects = join(scratch, 'objects');
      const { tree } = this.commitChange(base, changes, message, objects);
      const env = this.env({ GIT_OBJECT_DIRECTORY: objects, GIT_ALTERNATE_OBJECT_DIRECTORIES: this.objectsDir() });
      return this.run(
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
          base,
          tree,
        ],
        { env },
      ).toString('utf8');
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }
}
