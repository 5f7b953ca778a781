/**
 * Prompts as versioned configuration (core/prompt.ts, models/prompt.ts): the shipped
 * version describes every tool and argument exactly; a changed file changes the digest, a new
 * version becomes the default; versions order by number; a version the folder lacks and a tools
 * file that does not fit the tools are refused with what is wrong.
 */
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadPrompt, PromptError, promptVersions } from '../models/prompt';
import { orderedVersions, systemText } from '../core/prompt';
import { TOOLS } from '../core/tools';
import { BUILD_PROMPTS_DIR, PROJECT_ROOT } from '../host/settings';
import { tempDir } from './helpers/run-dir';

/** A prompts folder of its own: a copy of the repository's. */
function promptsCopy(): string {
  const dir = join(tempDir('prompts'), 'prompts');
  cpSync(join(PROJECT_ROOT, 'prompts'), dir, { recursive: true });
  return dir;
}

const failure = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    return err instanceof PromptError ? `${err.kind}: ${err.message}` : `not a PromptError: ${String(err)}`;
  }
  return 'no error';
};

describe('prompt versions', () => {
  it('ships v1 in the build, describing every tool and each argument of its schema', () => {
    const { ref, texts } = loadPrompt(BUILD_PROMPTS_DIR);
    expect(ref).toEqual({ version: 'v1', digest: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(Object.keys(texts.tools).sort()).toEqual(Object.keys(TOOLS).sort());
    expect(texts.system).toBe(readFileSync(join(PROJECT_ROOT, 'prompts', 'v1', 'system.md'), 'utf8').replace(/\n$/, ''));
    // The build's copy is the repository's.
    expect(loadPrompt(promptsCopy())).toEqual(loadPrompt(BUILD_PROMPTS_DIR));
  });

  it('changes the digest when a file changes, and the default version when a newer one is added', () => {
    const dir = promptsCopy();
    const first = loadPrompt(dir).ref;
    writeFileSync(join(dir, 'v1', 'system.md'), `${readFileSync(join(dir, 'v1', 'system.md'), 'utf8')}Keep every change small.\n`);
    const edited = loadPrompt(dir).ref;
    expect(edited.version).toBe('v1');
    expect(edited.digest).not.toBe(first.digest);

    const tools = JSON.parse(readFileSync(join(dir, 'v1', 'tools.json'), 'utf8'));
    tools.tools.read_file.arguments.path = 'The path of the file, relative to the repository root.';
    writeFileSync(join(dir, 'v1', 'tools.json'), JSON.stringify(tools));
    const retitled = loadPrompt(dir).ref;
    expect(retitled.digest).not.toBe(edited.digest);
    // The heading of a repository's instructions is part of the version too.
    writeFileSync(join(dir, 'v1', 'project-instructions.md'), '## Notes from the repository\n');
    const described = loadPrompt(dir).ref;
    expect(described.digest).not.toBe(retitled.digest);
    expect(systemText(loadPrompt(dir).texts, 'Run make test.')).toMatch(/\n\n## Notes from the repository\n\nRun make test\.$/);

    // A newer version is the default; the older one stays loadable by name, with its own digest.
    cpSync(join(dir, 'v1'), join(dir, 'v2'), { recursive: true });
    writeFileSync(join(dir, 'v2', 'system.md'), 'You are a careful coding agent.\n');
    expect(promptVersions(dir)).toEqual(['v1', 'v2']);
    const newest = loadPrompt(dir).ref;
    expect(newest.version).toBe('v2');
    expect(newest.digest).not.toBe(described.digest);
    expect(loadPrompt(dir, 'v1').ref).toEqual(described);
    // Reformatting a file without changing a text keeps the digest: it is of the content.
    writeFileSync(join(dir, 'v2', 'tools.json'), JSON.stringify(JSON.parse(readFileSync(join(dir, 'v2', 'tools.json'), 'utf8')), null, 4));
    expect(loadPrompt(dir).ref).toEqual(newest);
  });

  it('orders versions by number and leaves other names out', () => {
    expect(orderedVersions(['v10', 'v2', 'notes', 'v1', 'v02', 'V3'])).toEqual(['v1', 'v2', 'v10']);
  });

  it('refuses a version the folder lacks, and prompt files that do not fit the tools', () => {
    const dir = promptsCopy();
    expect(failure(() => loadPrompt(dir, 'v9'))).toBe('unknown_version: prompt version v9 does not exist; the worker has v1');
    const tools = JSON.parse(readFileSync(join(dir, 'v1', 'tools.json'), 'utf8'));
    delete tools.tools.search.arguments.max_results;
    tools.tools.search.arguments.regex = 'Not an argument of search.';
    tools.tools.shell = { description: 'No such tool.', arguments: {} };
    delete tools.tools.merge_task;
    writeFileSync(join(dir, 'v1', 'tools.json'), JSON.stringify(tools));
    expect(failure(() => loadPrompt(dir))).toBe(
      'invalid: prompt v1: tools.json does not fit the tools: shell: no such tool; search.arguments.max_results: missing; search.arguments.regex: no such argument; merge_task: missing',
    );
    writeFileSync(join(dir, 'v1', 'system.md'), '\n');
    expect(failure(() => loadPrompt(dir))).toBe('invalid: prompt v1: system.md is empty');
    writeFileSync(join(dir, 'v1', 'system.md'), 'Rules.\n');
    rmSync(join(dir, 'v1', 'project-instructions.md'));
    expect(failure(() => loadPrompt(dir))).toMatch(/^invalid: prompt v1: cannot read project-instructions\.md: ENOENT/);
    const empty = join(tempDir('prompts-empty'), 'prompts');
    mkdirSync(join(empty, 'drafts'), { recursive: true });
    expect(failure(() => loadPrompt(empty))).toBe(`invalid: the prompts folder ${empty} holds no version (v1, v2, ...)`);
  });
});
