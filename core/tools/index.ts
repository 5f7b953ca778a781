import { z } from 'zod';
import { apply_patchArgs } from './apply_patch';
import { readFileArgs } from './read_file';
import { run_testsArgs } from './run_tests';
import { searchArgs } from './search';
import { show_diffArgs } from './show_diff';
import { dispatch_taskArgs, merge_taskArgs, message_taskArgs, stop_taskArgs, task_statusArgs } from './orchestration';

/**
 * The five tools of every run: the schema each call is validated by. What the model reads about a
 * tool and each of its arguments is prompt configuration, versioned beside the system prompt
 * (prompts/<version>/tools.json, core/prompt.ts).
 */
const BASE_TOOLS = {
  read_file: { args: readFileArgs },
  search: { args: searchArgs },
  apply_patch: { args: apply_patchArgs },
  run_tests: { args: run_testsArgs },
  show_diff: { args: show_diffArgs },
} as const;

/** The tools of an orchestrating run (`subruns` enabled), beside the five. */
const ORCHESTRATION_TOOLS = {
  dispatch_task: { args: dispatch_taskArgs },
  message_task: { args: message_taskArgs },
  stop_task: { args: stop_taskArgs },
  task_status: { args: task_statusArgs },
  merge_task: { args: merge_taskArgs },
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

/** Tools that only read the workspace and return at once: a step with one of them needs no server round trip. */
export const READ_ONLY_TOOLS: ReadonlySet<ToolName> = new Set<ToolName>(['read_file', 'search', 'show_diff']);

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

/** The model-facing texts of every tool: its description and one line per argument (a prompt version's tools.json). */
export type ToolTexts = Record<ToolName, { description: string; arguments: Record<string, string> }>;

/** The fields of a tool's arguments (every tool's arguments are one object). */
export function argumentShape(name: ToolName): Record<string, z.ZodType> {
  return (TOOLS[name].args as unknown as z.ZodObject).shape as Record<string, z.ZodType>;
}

/**
 * A tool's arguments as the model is told them: the validating schema's fields, each described
 * by the prompt's text. Refinements across fields stay with validation; JSON Schema cannot say them.
 */
export function describedArguments(name: ToolName, texts: ToolTexts): z.ZodObject {
  const described = Object.fromEntries(
    Object.entries(argumentShape(name)).map(([field, schema]) => [field, schema.describe(texts[name].arguments[field])]),
  );
  return z.strictObject(described);
}

/** Tool definitions for a model provider, generated from the same schemas that validate calls. */
export interface ToolDefinition {
  name: ToolName;
  description: string;
  parameters: Record<string, unknown>;
}

export function toolDefinitions(texts: ToolTexts, orchestrating = false): ToolDefinition[] {
  return toolNames(orchestrating).map((name) => ({
    name,
    description: texts[name].description,
    parameters: z.toJSONSchema(describedArguments(name, texts), { io: 'input' }) as Record<string, unknown>,
  }));
}
