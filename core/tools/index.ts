import { z } from 'zod';
import { apply_patchArgs, apply_patchDescription } from './apply_patch';
import { readFileArgs, readFileDescription } from './read_file';
import { run_testsArgs, run_testsDescription } from './run_tests';
import { searchArgs, searchDescription } from './search';
import { show_diffArgs, show_diffDescription } from './show_diff';

/** The five tools: one schema and one model-facing description each. */
export const TOOLS = {
  read_file: { args: readFileArgs, description: readFileDescription },
  search: { args: searchArgs, description: searchDescription },
  apply_patch: { args: apply_patchArgs, description: apply_patchDescription },
  run_tests: { args: run_testsArgs, description: run_testsDescription },
  show_diff: { args: show_diffArgs, description: show_diffDescription },
} as const;

export type ToolName = keyof typeof TOOLS;
export const TOOL_NAMES = Object.keys(TOOLS) as ToolName[];

export type ReadFileArgs = z.infer<typeof readFileArgs>;
export type SearchArgs = z.infer<typeof searchArgs>;
export type ApplyPatchArgs = z.infer<typeof apply_patchArgs>;
export type RunTestsArgs = z.infer<typeof run_testsArgs>;
export type ShowDiffArgs = z.infer<typeof show_diffArgs>;

export interface ToolArgsByName {
  read_file: ReadFileArgs;
  search: SearchArgs;
  apply_patch: ApplyPatchArgs;
  run_tests: RunTestsArgs;
  show_diff: ShowDiffArgs;
}

/** A validated call: the name narrows the arguments. */
export type ValidCall = { [N in ToolName]: { call_id: string; name: N; arguments: ToolArgsByName[N] } }[ToolName];

export function isToolName(name: string): name is ToolName {
  return Object.prototype.hasOwnProperty.call(TOOLS, name);
}

/** Tool definitions for a model provider, generated from the same schemas that validate calls. */
export interface ToolDefinition {
  name: ToolName;
  description: string;
  parameters: Record<string, unknown>;
}

export function toolDefinitions(): ToolDefinition[] {
  return TOOL_NAMES.map((name) => ({
    name,
    description: TOOLS[name].description,
    parameters: z.toJSONSchema(TOOLS[name].args, { io: 'input' }) as Record<string, unknown>,
  }));
}
