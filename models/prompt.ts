/**
 * Reads a prompt version (core/prompt.ts) from the prompts folder: `<dir>/v<N>/system.md`,
 * `project-instructions.md` and `tools.json`, checked against the harness's tools (every tool and argument has its
 * one text, nothing else). `loadRun` reads it once and stores it in the host store under its
 * digest; every request of the run is built from that stored content, so editing the files
 * during a run changes nothing of it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { orderedVersions, toolTextProblems, toolsFileSchema, type PromptRef, type PromptTexts } from '../core/prompt';
import type { ToolTexts } from '../core/tools';
import { formatIssues } from '../core/validate';
import { digestJson } from '../host/digest';

export class PromptError extends Error {
  override name = 'PromptError';
  constructor(
    /** `unknown_version`: the run named a version the folder lacks; `invalid`: the folder or a file is unusable. */
    readonly kind: 'unknown_version' | 'invalid',
    message: string,
  ) {
    super(message);
  }
}

/** The prompt versions of `dir`, oldest first. */
export function promptVersions(dir: string): string[] {
  try {
    return orderedVersions(
      readdirSync(dir, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name),
    );
  } catch (err) {
    throw new PromptError('invalid', `cannot read the prompts folder ${dir}: ${(err as Error).message}`);
  }
}

/** The named version, or the newest; its texts and reference (version and digest). */
export function loadPrompt(dir: string, version?: string): { ref: PromptRef; texts: PromptTexts } {
  const versions = promptVersions(dir);
  if (versions.length === 0) throw new PromptError('invalid', `the prompts folder ${dir} holds no version (v1, v2, ...)`);
  const chosen = version ?? versions[versions.length - 1];
  if (!versions.includes(chosen))
    throw new PromptError('unknown_version', `prompt version ${chosen} does not exist; the worker has ${versions.join(', ')}`);
  const read = (file: string): string => {
    try {
      return readFileSync(join(dir, chosen, file), 'utf8');
    } catch (err) {
      throw new PromptError('invalid', `prompt ${chosen}: cannot read ${file}: ${(err as Error).message}`);
    }
  };
  // The file's one final newline is the file's, not the prompt's.
  const system = read('system.md').replace(/\n$/, '');
  if (system.trim() === '') throw new PromptError('invalid', `prompt ${chosen}: system.md is empty`);
  const projectInstructions = read('project-instructions.md').replace(/\n$/, '');
  if (projectInstructions.trim() === '') throw new PromptError('invalid', `prompt ${chosen}: project-instructions.md is empty`);
  let raw: unknown;
  try {
    raw = JSON.parse(read('tools.json'));
  } catch (err) {
    if (err instanceof PromptError) throw err;
    throw new PromptError('invalid', `prompt ${chosen}: tools.json is not JSON: ${(err as Error).message}`);
  }
  const parsed = toolsFileSchema.safeParse(raw);
  if (!parsed.success) throw new PromptError('invalid', `prompt ${chosen}: tools.json: ${formatIssues(parsed.error)}`);
  const problems = toolTextProblems(parsed.data.tools);
  if (problems.length > 0) throw new PromptError('invalid', `prompt ${chosen}: tools.json does not fit the tools: ${problems.join('; ')}`);
  const texts: PromptTexts = { system, project_instructions: projectInstructions, tools: parsed.data.tools as ToolTexts };
  // The same digest the host store files it under (SHA-256 of the canonical JSON).
  return { ref: { version: chosen, digest: digestJson(texts) }, texts };
}
