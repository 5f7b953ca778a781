/**
 * A git repository as a source of work, on real repositories made with git: the base read with
 * plumbing (committed content only), the workspace written from the tree (executable bits,
 * symlinks as links, binary files, submodules skipped), and a verified change brought back as a
 * branch or a patch, with nothing else of the repository touched.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { inspectBase, keepVerifiedChange, prepareRepositoryWorkspace, readVerifiedChange, treeChanges } from '../host/repository';
import { workspaceDiff } from '../tools/show_diff';
import { baselineManifest, manifest, runPaths } from '../host/workspace/workspace';
import { GitError, GitRepository } from '../host/git';
import { BINARY, git, gitBuffer, objectNames, repoPicture, sampleRepo } from './helpers/git-repo';
import { LINKCHECK, tempDir } from './helpers/run-dir';

const gitError = (fn: () => unknown): GitError => {
  try {
    fn();
  } catch (err) {
    if (err instanceof GitError) return err;
    throw err;
  }
  throw new Error('no GitError');
};

describe('opening a repository', () => {
  it('takes a folder with .git and a bare repository, and nothing else', () => {
    const { dir, head } = sampleRepo(LINKCHECK);
    expect(GitRepository.open(dir).resolveCommit('HEAD')).toBe(head);
    const bare = join(tempDir('bare'), 'project.git');
    git(dir, 'clone', '-q', '--bare', dir, bare);
    expect(GitRepository.open(bare).resolveCommit('main')).toBe(head);
    expect(GitRepository.open(bare).bare).toBe(true);

    expect(gitError(() => GitRepository.open(join(dir, 'src'))).kind).toBe('not_a_repository'); // inside one, but not one
    expect(gitError(() => GitRepository.open(tempDir('plain'))).message).toMatch(
      /is not a git repository \(no \.git folder, and not a bare repository\)/,
    );
    expect(gitError(() => GitRepository.open('/no/such/folder')).message).toMatch(/no such folder/);
    const unknown = gitError(() => GitRepository.open(dir).resolveCommit('no-such-branch'));
    expect([unknown.kind, unknown.message]).toEqual(['unknown_ref', 'unknown ref "no-such-branch": no commit of that name']);
    expect(gitError(() => GitRepository.open(dir).resolveCommit('--output=x')).kind).toBe('unknown_ref');
  });
});

describe('the workspace from the base tree', () => {
  it('holds the committed tree only, with modes, links and bytes as git has them, submodules left out', async () => {
    const { dir, head } = sampleRepo(LINKCHECK, {}, { submodule: true });
    const before = repoPicture(dir);
    const repo = GitRepository.open(dir);
    const inspected = inspectBase(repo, { path: dir, base_commit: head, task: 'fix it' });
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
    await prepareRepositoryWorkspace(paths, inspected.ref);
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

  it('refuses a tree with a path it may not write, naming it', () => {
    const { dir } = sampleRepo(LINKCHECK);
    // A tree object whose entry is named `..`: git's own commands would never make one.
    const blob = git(dir, 'hash-object', '-w', '--stdin', '--path=x').trim();
    const tree = execFileSync('git', ['mktree', '--missing'], { cwd: dir, input: `100644 blob ${blob}\t..\n` })
      .toString()
      .trim();
    const commit = git(dir, 'commit-tree', tree, '-m', 'bad').trim();
    const inspected = inspectBase(GitRepository.open(dir), { path: dir, base_commit: commit, task: 't' });
    expect(inspected).toEqual({
      ok: false,
      detail: 'the base tree has a path with a ".." segment (".."); it cannot be written into a workspace',
    });
  });
});

describe('the verified change back in the repository', () => {
  it('makes one commit on the base with exactly the change (modes, links, binary, deletions), as a branch and as a patch', async () => {
    const { dir, head } = sampleRepo(LINKCHECK, {}, { submodule: true });
    const repo = GitRepository.open(dir);
    const inspected = inspectBase(repo, { path: dir, base_commit: head, task: 'fix it' });
    if (!inspected.ok) throw new Error(inspected.detail);
    const paths = runPaths(tempDir('agent-state'), 'run-1');
    await prepareRepositoryWorkspace(paths, inspected.ref);

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
    const { changes, unrepresentable } = treeChanges(baselineManifest(paths), manifest(ws));
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
    keepVerifiedChange(paths, head, changes);
    // What the run's tests do afterwards is not part of the verified change.
    writeFileSync(join(ws, 'src', 'linkcheck.py'), 'changed after verification\n');
    const kept = readVerifiedChange(paths);

    const before = repoPicture(dir);
    const objects = objectNames(join(dir, '.git'));
    const patch = repo.patch(kept.base_commit, kept.changes, 'message');
    expect(objectNames(join(dir, '.git'))).toEqual(objects); // the patch wrote nothing into the repository
    expect(repoPicture(dir)).toEqual(before);

    const { commit } = repo.commitChange(kept.base_commit, kept.changes, 'Fix the checker\n\nAgent-Run: run-1\n');
    const ref = repo.createBranch('agent/run-1', commit, 'coding-agent: run-1');
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
    expect(gitError(() => repo.createBranch('agent/run-1', head, 'again')).kind).toBe('ref_exists');
    expect(gitError(() => repo.createBranch('main', commit, 'again')).kind).toBe('ref_exists');
    expect(gitError(() => repo.createBranch('bad..name', commit, 'x')).kind).toBe('bad_ref_name');
    expect(repoPicture(dir)).toEqual(after);
  });
});
