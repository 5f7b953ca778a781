/**
 * Prompts as versioned configuration. A prompt version is a folder `prompts/v<N>/` holding the
 * system prompt (`system.md`), the heading that introduces a repository's own instructions
 * (`project-instructions.md`) and the model-facing texts of every tool and each of its arguments
 * (`tools.json`; the newest version's is the tool table's `toolsFileText()`, core/tools.ts). A run
 * names a version or takes the newest, and records the version with the digest of its content
 * (the SHA-256 of the canonical JSON of `PromptTexts`), so a changed text is a changed digest.
 * Pure: the files are read by models/prompt.ts.
 */
import { z } from 'zod';
import { matching } from './patterns';
import { argumentShape, TOOLS, type ToolName, type ToolTexts } from './tools';

/** A version's name: `v1`, `v2`, ... (the number orders them). */
export const PROMPT_VERSION = /^v[1-9][0-9]{0,5}$/;
export const promptVersionSchema = matching(PROMPT_VERSION, 'a prompt version is v<N>, e.g. v1');

/** What the model reads besides the run's own facts. */
export interface PromptTexts {
  system: string;
  /** Introduces a repository run's project instructions (AGENTS.md) after the system prompt. */
  project_instructions: string;
  tools: ToolTexts;
}

/**
 * The system prompt of a run: the harness's rules, then a repository run's project instructions
 * (AGENTS.md, capped) under their heading. Both stay the same for every request of the run, so
 * they are part of the stable front of the prompt that providers cache.
 */
export function systemText(texts: PromptTexts, instructions: string | null): string {
  return instructions === null ? texts.system : [texts.system, '', texts.project_instructions, '', instructions].join('\n');
}

/** The prompt a run uses: its version and the digest of its content. */
export interface PromptRef {
  version: string;
  digest: string;
}

export const toolsFileSchema = z.strictObject({
  schema_version: z.literal(1),
  tools: z.record(z.string(), z.strictObject({ description: z.string().min(1), arguments: z.record(z.string(), z.string().min(1)) })),
});

/** Where a tools file and the harness's tools disagree, one line each; empty when every tool and argument has its one text. */
export function toolTextProblems(tools: z.output<typeof toolsFileSchema>['tools']): string[] {
  const problems: string[] = [];
  const names = Object.keys(TOOLS) as ToolName[];
  for (const extra of Object.keys(tools).filter((n) => !names.includes(n as ToolName))) problems.push(`${extra}: no such tool`);
  for (const name of names) {
    const texts = tools[name];
    if (texts === undefined) {
      problems.push(`${name}: missing`);
      continue;
    }
    const fields = Object.keys(argumentShape(name));
    for (const field of fields.filter((f) => !(f in texts.arguments))) problems.push(`${name}.arguments.${field}: missing`);
    for (const field of Object.keys(texts.arguments).filter((f) => !fields.includes(f)))
      problems.push(`${name}.arguments.${field}: no such argument`);
  }
  return problems;
}

/** The versions in ascending order (v2 before v10); names that are not versions are left out. */
export function orderedVersions(names: string[]): string[] {
  return names.filter((n) => PROMPT_VERSION.test(n)).sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
}
