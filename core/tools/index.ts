import { z } from 'zod';
import { apply_patchArgs, apply_patchDescription } from './apply_patch';
import { readFileArgs, readFileDescription } from './read_file';
import { run_testsArgs, run_testsDescription } from './run_tests';
import { searchArgs, searchDescription } from './search';
import { show_diffArgs, show_diffDescription } from './show_diff';
import {
  dispatch_taskArgs,
  dispatch_taskDescription,
  merge_taskArgs,
  merge_taskDescription,
  message_taskArgs,
  message_taskDescription,
  stop_taskArgs,
  stop_taskDescription,
  task_statusArgs,
  task_statusDescription,
} from './orchestration';

/** The five tools of every run: one schema and one model-facing description each. */
const BASE_TOOLS = {
  read_file: { args: readFileArgs, description: readFileDescription },
  search: { args: searchArgs, description: searchDescription },
  apply_patch: { args: apply_patchArgs, description: apply_patchDescription },
  run_tests: { args: run_testsArgs, description: run_testsDescription },
  show_diff: { args: show_diffArgs, description: show_diffDescription },
} as const;

/** The tools of an orchestrating run (`subruns` enabled), beside the five. */
const ORCHESTRATION_TOOLS = {
  dispatch_task: { args: dispatch_taskArgs, description: dispatch_taskDescription },
  message_task: { args: message_taskArgs, description: message_taskDescription },
  stop_task: { args: stop_taskArgs, description: stop_taskDescription },
  task_status: { args: task_statusArgs, description: task_statusDescription },
  merge_task: { args: merge_taskArgs, description: merge_taskDescription },
} as const;

export const TOOLS = { ...BASE_TOOLS, ...ORCHESTRATION_TOOLS } as const;

export type ToolName = keyof typeof TOOLS;
export type OrchestrationToolName = keyof typeof ORCHESTRATION_TOOLS;
/** The five tools every run has. */
export const TOOL_NAMES = Object.keys(BASE_TOOLS) as ToolName[];
export const ORCHESTRATION_TOOL_NAMES = Object.keys(ORCHESTRATION_TOOLS) as OrchestrationToolName[];

/** The tools a run may call: the five, and the orchestration tools when sub-runs are enabled. */
export function toolNames(orchestrating: boolean): ToolName[] {
  return orchestrating ? [...TOOL_NAMES, ...ORCHESTRATION_TOOL_NAMES] : TOOL_NAMES;
}

export function isOrchestrationTool(name: string): name is OrchestrationToolName {
  return Object.prototype.hasOwnProperty.call(ORCHESTRATION_TOOLS, name);
}

export type ReadFileArgs = z.infer<typeof readFileArgs>;
export type SearchArgs = z.infer<typeof searchArgs>;
export type ApplyPatchArgs = z.infer<typeof apply_patchArgs>;
export type RunTestsArgs = z.infer<typeof run_testsArgs>;
export type ShowDiffArgs = z.infer<typeof show_diffArgs>;
export type DispatchTaskArgs = z.infer<typeof dispatch_taskArgs>;

export type ToolArgsByName = { [N in ToolName]: z.infer<(typeof TOOLS)[N]['args']> };

/** A validated call: the name narrows the arguments. */
export type ValidCall = { [N in ToolName]: { call_id: string; name: N; arguments: ToolArgsByName[N] } }[ToolName];

export function isToolName(name: string, orchestrating = false): name is ToolName {
  return toolNames(orchestrating).includes(name as ToolName);
}

/** Tool definitions for a model provider, generated from the same schemas that validate calls. */
export interface ToolDefinition {
  name: ToolName;
  description: string;
  parameters: Record<string, unknown>;
}

export function toolDefinitions(orchestrating = false): ToolDefinition[] {
  return toolNames(orchestrating).map((name) => ({
    name,
    description: TOOLS[name].description,
    parameters: z.toJSONSchema(TOOLS[name].args, { io: 'input' }) as Record<string, unknown>,
  }));
}
