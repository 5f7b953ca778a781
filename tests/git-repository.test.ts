/**
 * A git repository as a source of work, on real repositories made with git: the base read with
 * plumbing (committed content only), the workspace written from the tree (executable bits,
 * symlinks as links, binary files, submodules skipped), and a verified change brought back as a
 * branch or a patch, with nothing else of the repository touched.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Dockerode from 'dockerode';
import { inspectBase, prepareRepositoryWorkspace, withRepository } from '../workspace/repository';
import { keepVerifiedChange, readVerifiedChange, changeEntries, VerifiedChangeError } from '../workspace/verified-change';
import { workspaceDiff } from '../workspace/diff';
import { baselineManifest, manifest, runPaths } from '../workspace/workspace';
import { commitToBranch, DEFAULT_REPOSITORY_LIMITS, GitError, GitRepository, hostGit, RepositoryWriter } from '../workspace/git';
import { readSettings } from '../host/settings';
import { repositoryRunners } from '../sandbox/git-sandbox';
import { BINARY, git, gitBuffer, objectNames, repoPicture, sampleRepo } from './helpers/git-repo';
import { LINKCHECK, tempDir } from './helpers/run-dir';

const gitError = async (fn: () => Promise<unknown>): Promise<GitError> => {
  try {
    await fn();
  } catch (err) {
    if (err instanceof GitError) return err;
    throw err;
  }
  throw new Error('no GitError');
};

const settings = readSettings();
const runners = repositoryRunners({
  docker: new Dockerode(),
  image: settings.gitImage,
  path: process.env.PATH!,
  limits: DEFAULT_REPOSITORY_LIMITS,
});
const machineGit = (dir: string) => hostGit(dir, { path: process.env.PATH!, idleMs: 5000, totalMs: 60_000 });

/** Every case twice: through the machine's git (a trusted repository) and through git in a container (any other). */
describe.each(['host', 'sandbox'] as const)('read through git on the %s', (read) => {
  const open = runners(read);
  const onRepo = <T>(dir: string, fn: (repo: GitRepository) => Promise<T>) => withRepository(open, dir, DEFAULT_REPOSITORY_LIMITS, fn);

  describe('opening a repository', () => {
    it('takes a folder with .git and a bare repository, and nothing else', async () => {
      const { dir, head } = sampleRepo(LINKCHECK);
      expect(await onRepo(dir, (r) => r.resolveCommit('HEAD'))).toBe(head);
      const bare = join(tempDir('bare'), 'project.git');
      git(dir, 'clone', '-q', '--bare', dir, bare);
      expect(await onRepo(bare, async (r) => [await r.resolveCommit('main'), r.bare])).toEqual([head, true]);

      expect((await gitError(() => onRepo(join(dir, 'src'), async () => null))).kind).toBe('not_a_repository'); // inside one, but not one
      expect((await gitError(() => onRepo(tempDir('plain'), async () => null))).message).toMatch(
        /is not a git repository \(no \.git folder, and not a bare repository\)/,
      );
      expect((await gitError(() => onRepo('/no/such/folder', async () => null))).message).toMatch(/no such folder/);
      const unknown = await gitError(() => onRepo(dir, (r) => r.resolveCommit('no-such-branch')));
      expect([unknown.kind, unknown.message]).toEqual(['unknown_ref', 'unknown ref "no-such-branch": no commit of that name']);
      expect((await gitError(() => onRepo(dir, (r) => r.resolveCommit('--output=x')))).kind).toBe('unknown_ref');
    });
  });

  describe('the workspace from the base tree', () => {
    it('holds the committed tree only, with modes, links and bytes as git has them, submodules left out', async () => {
      const { dir, head } = sampleRepo(LINKCHECK, {}, { submodule: true });
      const before = repoPicture(dir);
      const inspected = await onRepo(dir, (repo) => inspectBase(repo, { path: dir, base_commit: head, task: 'fix it' }));
      if (!inspected.ok) throw new Error(inspected.detail);
      expect(inspected.facts).toMatchObject({
        name: 'project',
        base_commit: head,
        settings_digest: null,
        tests_source: 'detected: pytest (Python test files under tests/)',
        acceptance: null,
        submodules: ['vendor/lib'],
      });
      const committedAgents = gitBuffer(dir, 'show', `${head}:AGENTS.md`);
      expect(inspected.instructions!.text).toBe(committedAgents.toString('utf8')); // not the unstaged edit
      expect(inspected.spec.protected).toEqual(expect.arrayContaining(['vendor/lib', 'vendor/lib/**', '.git/**']));

      const paths = runPaths(tempDir('agent-state'), 'run-1');
      await prepareRepositoryWorkspace(paths, inspected.ref, open, DEFAULT_REPOSITORY_LIMITS);
      const entries = new Map(manifest(paths.workspace).map((e) => [e.path, e]));
      expect(entries.get('tools/check.sh')).toMatchObject({ kind: 'file', executable: true });
      expect(entries.get('tools/gen.sh')).toMatchObject({ kind: 'file', executable: false });
      expect(entries.get('tools/check.link')).toEqual({ path: 'tools/check.link', kind: 'symlink', target: 'check.sh' });
      expect(entries.get('tools/outside.link')).toEqual({ path: 'tools/outside.link', kind: 'symlink', target: '/etc/passwd' });
      expect(readFileSync(join(paths.workspace, 'assets', 'logo.bin'))).toEqual(BINARY);
      expect(readFileSync(join(paths.workspace, '.gitignore'), 'utf8')).toBe('*.log\nbuild/\n'); // the committed one, not the staged one
      for (const absent of ['debug.log', 'build', 'build/out.txt', 'untracked-notes.txt', 'staged-new.txt', 'vendor/lib', '.git'])
        expect(entries.has(absent)).toBe(false);
      expect(baselineManifest(paths)).toEqual([...entries.values()]);
      expect(repoPicture(dir)).toEqual(before);
    });

    it('keeps an acceptance folder the settings name out of the workspace, in the control folder, and protected', async () => {
      const hidden = {
        'hidden/expected.json': readFileSync(join(LINKCHECK, 'acceptance', 'expected.json'), 'utf8'),
        'hidden/check.py': readFileSync(join(LINKCHECK, 'acceptance', 'check.py'), 'utf8'),
      };
      const settings = { schema_version: 1, acceptance: { dir: 'hidden', command: ['python3', '{acceptance}/check.py'], timeout_s: 60 } };
      const { dir, head } = sampleRepo(LINKCHECK, { '.coding-agent.json': JSON.stringify(settings), ...hidden });
      const inspected = await onRepo(dir, (repo) => inspectBase(repo, { path: dir, base_commit: head, task: 'fix it' }));
      if (!inspected.ok) throw new Error(inspected.detail);
      expect(inspected.facts.acceptance).toBe('settings');
      expect(inspected.ref.acceptance_tree_dir).toBe('hidden');
      expect(inspected.spec.protected).toEqual(expect.arrayContaining(['hidden', 'hidden/**']));
      const listed = git(dir, 'ls-tree', '-r', '--name-only', head).trim().split('\n');
      expect(inspected.facts.files).toBe(listed.filter((p) => !p.startsWith('hidden/')).length);

      const paths = runPaths(tempDir('agent-state'), 'run-1');
      await prepareRepositoryWorkspace(paths, inspected.ref, open, DEFAULT_REPOSITORY_LIMITS);
      expect(manifest(paths.workspace).some((e) => e.path === 'hidden' || e.path.startsWith('hidden/'))).toBe(false);
      for (const [path, text] of Object.entries(hidden))
        expect(readFileSync(join(paths.control, 'acceptance', path.slice('hidden/'.length)), 'utf8')).toBe(text);
      expect(existsSync(join(paths.control, 'import-plan.json'))).toBe(false); // the plan went with the import
    });

    it("refuses a tree past each of the operator's limits, naming the limit (its listing judged in a workspace thread)", async () => {
      const { dir, head } = sampleRepo(LINKCHECK);
      const refusal = async (limits: Partial<typeof DEFAULT_REPOSITORY_LIMITS>) => {
        const within = { ...DEFAULT_REPOSITORY_LIMITS, ...limits };
        const inspected = await withRepository(open, dir, within, (r) => inspectBase(r, { path: dir, base_commit: head, task: 't' }));
        return inspected.ok ? 'accepted' : inspected.detail;
      };
      expect(await refusal({})).toBe('accepted');
      expect(await refusal({ files: 3 })).toBe('too_large: the base tree has more than 3 files (AGENT_REPOSITORY_LIMITS.files)');
      expect(await refusal({ bytes: 100 })).toBe(
        "too_large: the base tree's files hold more than 100 bytes (AGENT_REPOSITORY_LIMITS.bytes)",
      );
      expect(await refusal({ blob_bytes: 60 })).toMatch(
        /^too_large: "[^"]+" in the base tree has \d+ bytes, over 60 \(AGENT_REPOSITORY_LIMITS\.blob_bytes\)$/,
      );
      expect(await refusal({ path_bytes: 12 })).toBe(
        'too_large: a path of the base tree is longer than 12 bytes (AGENT_REPOSITORY_LIMITS.path_bytes)',
      );
      expect(await refusal({ depth: 0 })).toBe(
        'too_large: a path of the base tree is more than 0 folders deep (AGENT_REPOSITORY_LIMITS.depth)',
      );
    });

    it("refuses a tree whose settings or submodules would make the run's rules larger than the history should carry", async () => {
      const over =
        /^too_large: the base tree's settings and submodules make \d+ bytes of the run's rules, over 131072 \(they travel in the run's history and the model's context\)$/;
      const inspect = async (dir: string, commit: string) => {
        const inspected = await onRepo(dir, (repo) => inspectBase(repo, { path: dir, base_commit: commit, task: 't' }));
        return inspected.ok ? 'accepted' : inspected.detail;
      };
      // 5,000 patterns in the settings, each one valid.
      const patterns = Array.from({ length: 5000 }, (_, i) => `generated/file-${String(i).padStart(5, '0')}.txt`);
      const settings = { schema_version: 1, tests: { command: ['true'], format: 'pytest', timeout_s: 60 }, protected: patterns };
      const many = sampleRepo(LINKCHECK, { '.coding-agent.json': JSON.stringify(settings) });
      expect(await inspect(many.dir, many.head)).toMatch(over);
      // Submodules: gitlinks beside the base tree's entries, whose commits live elsewhere.
      const { dir, head } = sampleRepo(LINKCHECK);
      const withSubmodules = (n: number) => {
        const gitlinks = Array.from({ length: n }, (_, i) => `160000 commit ${head}\tsubmodule-with-a-long-name-${i}\n`);
        const listing = git(dir, 'ls-tree', 'HEAD') + gitlinks.join('');
        const tree = execFileSync('git', ['mktree', '--missing'], { cwd: dir, input: listing }).toString().trim();
        return git(dir, 'commit-tree', tree, '-p', head, '-m', `${n} submodules`).trim();
      };
      expect(await inspect(dir, withSubmodules(5000))).toMatch(over);
      // A tenth of either is a run.
      const few = sampleRepo(LINKCHECK, { '.coding-agent.json': JSON.stringify({ ...settings, protected: patterns.slice(0, 500) }) });
      expect(await inspect(few.dir, few.head)).toBe('accepted');
      expect(await inspect(dir, withSubmodules(500))).toBe('accepted');
    });

    it('refuses a tree with a path it may not write, naming it', async () => {
      const { dir } = sampleRepo(LINKCHECK);
      // A tree object whose entry is named `..`: git's own commands would never make one.
      const blob = git(dir, 'hash-object', '-w', '--stdin', '--path=x').trim();
      const tree = execFileSync('git', ['mktree', '--missing'], { cwd: dir, input: `100644 blob ${blob}\t..\n` })
        .toString()
        .trim();
      const commit = git(dir, 'commit-tree', tree, '-m', 'bad').trim();
      const inspected = await onRepo(dir, (repo) => inspectBase(repo, { path: dir, base_commit: commit, task: 't' }));
      expect(inspected).toEqual({
        ok: false,
        detail: 'the base tree has a path with a ".." segment (".."); it cannot be written into a workspace',
      });
    });
  });

  describe('the verified change back in the repository', () => {
    it('makes one commit on the base with exactly the change (modes, links, binary, deletions), as a branch and as a patch', async () => {
      const { dir, head } = sampleRepo(LINKCHECK, {}, { submodule: true });
      const inspected = await onRepo(dir, (repo) => inspectBase(repo, { path: dir, base_commit: head, task: 'fix it' }));
      if (!inspected.ok) throw new Error(inspected.detail);
      const paths = runPaths(tempDir('agent-state'), 'run-1');
      await prepareRepositoryWorkspace(paths, inspected.ref, open, DEFAULT_REPOSITORY_LIMITS);

      // What a run may do to its workspace: edit, create, chmod, link, delete, write bytes.
      const ws = paths.workspace;
      writeFileSync(join(ws, 'src', 'linkcheck.py'), `${readFileSync(join(ws, 'src', 'linkcheck.py'), 'utf8')}\n# fixed\n`);
      writeFileSync(join(ws, 'tests', 'test_agent_new.py'), 'def test_new():\n    assert True\n');
      chmodSync(join(ws, 'tools', 'gen.sh'), 0o755);
      chmodSync(join(ws, 'tools', 'check.sh'), 0o644);
      mkdirSync(join(ws, 'assets', 'more'));
      writeFileSync(join(ws, 'assets', 'more', 'data.bin'), Buffer.concat([BINARY, BINARY]));
      symlinkSync('../src/linkcheck.py', join(ws, 'tools', 'source.link'));
      unlinkSync(join(ws, 'notes.txt'));
      const { changes, unrepresentable } = changeEntries(baselineManifest(paths), manifest(ws));
      expect(unrepresentable).toEqual([]);
      expect(changes.map((c) => `${c.kind} ${c.path}`)).toEqual([
        'file assets/more/data.bin',
        'deleted notes.txt',
        'file src/linkcheck.py',
        'file tests/test_agent_new.py',
        'file tools/check.sh',
        'file tools/gen.sh',
        'symlink tools/source.link',
      ]);
      // The run's own diff (show_diff) shows what git will record: modes, links, binary files.
      const { diff, paths: diffPaths } = workspaceDiff(paths, 1 << 20, 1 << 20);
      expect(diffPaths).toEqual(changes.map((c) => c.path));
      expect(diff).toContain(
        'old mode 100644\nnew mode 100755\n===================================================================\n--- a/tools/gen.sh\n+++ b/tools/gen.sh\n',
      );
      expect(diff).toContain('old mode 100755\nnew mode 100644\n');
      expect(diff).toContain('Binary files a/assets/more/data.bin and b/assets/more/data.bin differ\n');
      expect(diff).toContain('new file mode 120000\n');
      expect(diff).toContain('+symlink -> ../src/linkcheck.py');
      keepVerifiedChange(paths, { base_commit: head, changes, summary: 'Fix the checker' });
      // What the run's tests do afterwards is not part of the verified change.
      writeFileSync(join(ws, 'src', 'linkcheck.py'), 'changed after verification\n');
      const kept = readVerifiedChange(paths);
      expect(kept.summary).toBe('Fix the checker');
      // Bytes other than those whose digests the verifier saw are never kept: the kept change stays.
      expect(() => keepVerifiedChange(paths, { base_commit: head, changes, summary: 'other' })).toThrow(
        new VerifiedChangeError('src/linkcheck.py changed while the verified change was kept'),
      );
      expect(readVerifiedChange(paths)).toEqual(kept);
      // A kept copy that is not what was verified is refused when read.
      const copy = join(paths.control, 'verified', 'files', 'tests', 'test_agent_new.py');
      writeFileSync(copy, 'def test_new():\n    assert False\n');
      expect(() => readVerifiedChange(paths)).toThrow(
        new VerifiedChangeError('tests/test_agent_new.py in the kept change differs from what was verified'),
      );

      const before = repoPicture(dir);
      const objects = objectNames(join(dir, '.git'));
      const patch = await onRepo(dir, (repo) => repo.patch(kept, 'message'));
      expect(objectNames(join(dir, '.git'))).toEqual(objects); // the patch wrote nothing into the repository
      expect(repoPicture(dir)).toEqual(before);

      const writer = machineGit(dir);
      const repository = await RepositoryWriter.open(writer, DEFAULT_REPOSITORY_LIMITS, dir);
      const { ref, commit } = await onRepo(dir, (repo) =>
        commitToBranch(repo, repository, {
          change: kept,
          message: 'Fix the checker\n\nAgent-Run: run-1\n',
          name: 'agent/run-1',
          reason: 'coding-agent: run-1',
          maxPackBytes: 1 << 30,
        }),
      );
      expect(ref).toBe('refs/heads/agent/run-1');
      expect(repoPicture(dir)).toEqual({ ...before, 'ref:refs/heads/agent/run-1': commit });
      expect(git(dir, 'rev-parse', `${commit}^@`).trim()).toBe(head);
      expect(git(dir, 'log', '-1', '--format=%B', commit)).toBe('Fix the checker\n\nAgent-Run: run-1\n\n');
      expect(git(dir, 'diff', '--binary', '--full-index', head, 'agent/run-1')).toBe(patch);
      expect(git(dir, 'diff', '--name-status', head, 'agent/run-1')).toBe(
        [
          'A\tassets/more/data.bin',
          'D\tnotes.txt',
          'M\tsrc/linkcheck.py',
          'A\ttests/test_agent_new.py',
          'M\ttools/check.sh',
          'M\ttools/gen.sh',
          'A\ttools/source.link',
          '',
        ].join('\n'),
      );
      const modes = Object.fromEntries(
        git(dir, 'ls-tree', '-r', 'agent/run-1')
          .split('\n')
          .filter(Boolean)
          .map((l) => [l.split('\t')[1], l.split(' ')[0]]),
      );
      expect(modes).toMatchObject({
        'tools/gen.sh': '100755',
        'tools/check.sh': '100644',
        'tools/source.link': '120000',
        'tools/outside.link': '120000',
        'vendor/lib': '160000',
      });
      expect(gitBuffer(dir, 'show', 'agent/run-1:assets/more/data.bin')).toEqual(Buffer.concat([BINARY, BINARY]));
      expect(git(dir, 'show', 'agent/run-1:src/linkcheck.py')).toContain('# fixed');

      // git apply takes the patch on the base tree, and gives the same files.
      const applied = tempDir('applied');
      execFileSync('sh', ['-c', `git -C "${dir}" archive ${head} | tar -x -C "${applied}"`]);
      execFileSync('git', ['apply', '--binary', '-'], { cwd: applied, input: patch });
      expect(readFileSync(join(applied, 'assets', 'more', 'data.bin'))).toEqual(Buffer.concat([BINARY, BINARY]));
      expect(readFileSync(join(applied, 'src', 'linkcheck.py'), 'utf8')).toContain('# fixed');

      // A name that exists is refused and changes nothing.
      const after = repoPicture(dir);
      expect((await gitError(() => repository.createBranch('agent/run-1', head, 'again'))).kind).toBe('ref_exists');
      expect((await gitError(() => repository.createBranch('main', commit, 'again'))).kind).toBe('ref_exists');
      expect((await gitError(() => repository.createBranch('bad..name', commit, 'x'))).kind).toBe('bad_ref_name');
      expect(repoPicture(dir)).toEqual(after);
      await writer.close();
    });
  });
});
