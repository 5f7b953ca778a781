/**
 * The tool table: every tool the model may call, once. Per tool: its name (the key), `kind`
 * (how a run carries it out), `args` (the zod schema each call is validated by) and the texts the
 * model reads (`description`, one line per argument). Everything that lists or dispatches tools
 * reads it: validation (validate.ts), the prompt's tools file (`toolsFileText`; a prompt
 * version's tools.json is checked against it, models/prompt.ts), the providers' schemas
 * (models/tool-schemas.ts), the tool activity and its handlers (tools/index.ts, typed by this
 * table, so a tool without a handler does not compile) and the workflow's `toolCall`.
 * Pure and workflow-safe.
 */
import { z } from 'zod';

/**
 * How a run carries a tool out:
 * - `read`: reads the workspace and returns at once (a local activity on the run's host);
 * - `test`: runs the candidate tests (an activity; what it changes in the workspace is undone);
 * - `write`: a change through the write path (prepare, approval, write, receipt);
 * - `orchestration`: carried out by the workflow on its sub-runs (`subruns` enabled).
 * An entry with `writes: true` is one whose outcome goes through the write path though its kind
 * is not `write` (merge_task: the workflow carries it out, and the merge is one approved write).
 */
export type ToolKind = 'read' | 'test' | 'write' | 'orchestration';

interface ToolEntry<K extends ToolKind, S extends z.ZodType, W extends boolean> {
  kind: K;
  /** Its outcome is a write through the write path (prepare, approval, write, receipt). */
  writes?: W;
  args: S;
  /** What the model reads about the tool (the newest prompt version's tools.json holds it). */
  description: string;
  /** One line per argument of `args`: exactly its fields. */
  arguments: { [F in keyof z.input<S>]-?: string };
}

/** A table row; the compiler holds that every argument has its text and no other. */
const tool = <K extends ToolKind, S extends z.ZodType, W extends boolean = false>(entry: ToolEntry<K, S, W>): ToolEntry<K, S, W> => entry;

const taskId = z.string().min(1).max(200);
const TASK_ID_TEXT = 'The task_id exactly as dispatch_task returned it.';

/** The five tools of every run. */
const BASE_TOOLS = {
  read_file: tool({
    kind: 'read',
    args: z
      .strictObject({
        path: z.string(),
        start: z.int().min(1).optional(),
        end: z.int().min(1).optional(),
      })
      .refine((a) => a.start === undefined || a.end === undefined || a.end >= a.start, {
        message: 'end must be >= start',
        path: ['end'],
      }),
    description:
      'Read a text file of the workspace, optionally a line range. Returns the text, the total number of lines and `version`, the digest of the whole file: pass it to apply_patch. Long results are cut at whole lines (`truncated`).',
    arguments: {
      path: 'Repo-relative path of the file, `/`-separated.',
      start: 'First line to return (1-based). Default 1.',
      end: 'Last line to return (inclusive). Default: the last line.',
    },
  }),
  search: tool({
    kind: 'read',
    args: z.strictObject({
      query: z.string().min(1).max(256),
      path: z.string().optional(),
      max_results: z.int().min(1).max(200).optional(),
    }),
    description:
      'Find a literal string in the text files of the workspace. Returns matching lines as {path, line, text}, sorted by path and line, and `skipped`: files that were not searched (binary, not UTF-8, too large).',
    arguments: {
      query: 'Literal text to find (not a regular expression), 1-256 characters.',
      path: 'Repo-relative folder to search in. Default: the whole workspace.',
      max_results: 'Maximum number of matching lines, 1-200. Default 50.',
    },
  }),
  apply_patch: tool({
    kind: 'write',
    args: z.strictObject({
      path: z.string(),
      version: z.string().regex(/^([0-9a-f]{64}|absent)$/, 'a lowercase hex SHA-256 digest or "absent"'),
      old: z.string(),
      new: z.string(),
    }),
    description:
      'Replace the single occurrence of `old` with `new` in a file, or create a file (version "absent", old ""). Each write waits for a human approval. Only writable files may change and only allowed new files may be created.',
    arguments: {
      path: 'Repo-relative path of the file to change or create.',
      version: 'The `version` read_file returned for this file, or "absent" to create a new file.',
      old: 'Exact text to replace; it must occur exactly once. Empty when creating a file.',
      new: 'Replacement text (the whole content when creating a file).',
    },
  }),
  run_tests: tool({
    kind: 'test',
    args: z.strictObject({ preset: z.literal('candidate_tests') }),
    description:
      "Run the repository's candidate tests. Returns status (passed, failed, no_tests, timeout, cancelled), the numbers of discovered, passed and failed tests, the failures and the tail of the output.",
    arguments: { preset: 'Which test command to run; only "candidate_tests" exists.' },
  }),
  show_diff: tool({
    kind: 'read',
    args: z.strictObject({}),
    description: 'Show the unified diff of the workspace against the starting repository, and the sorted list of changed paths.',
    arguments: {},
  }),
} as const;

/**
 * The tools of an orchestrating run (SPEC section 12), beside the five. A task is a child run
 * addressed by the id `dispatch_task` returned; ids are copied, never invented.
 */
const ORCHESTRATION_TOOLS = {
  dispatch_task: tool({
    kind: 'orchestration',
    args: z.strictObject({
      title: z.string().min(1).max(120),
      requirements: z.string().min(1).max(8000),
      known_facts: z.array(z.string().min(1).max(2000)).max(50),
      suggestions: z.array(z.string().min(1).max(2000)).max(20),
      paths: z.array(z.string().min(1).max(512)).max(100).optional(),
    }),
    description:
      'Start a sub-run that works on a task in its own copy of your current workspace. Returns its task_id. Keep the three parts apart: what the user asked (requirements), established facts with their resource ids (known_facts), and your advice (suggestions). When the task ends, its outcome, summary and changed paths reach you as a message; merge its change with merge_task.',
    arguments: {
      title: 'A short title for the task (it names the task in the roster).',
      requirements: "What the user asked that this task must achieve, in the user's terms.",
      known_facts: 'Facts already established, each with the resource it rests on (a path and line, a test id, a call id).',
      suggestions: 'Your own suggestions for how to go about it; the task takes them as advice only.',
      paths: 'Repo-relative paths the task may change (a subset of what you may change); default: all you may change.',
    },
  }),
  message_task: tool({
    kind: 'orchestration',
    args: z.strictObject({ task_id: taskId, text: z.string().min(1).max(4000) }),
    description:
      'Send a follow-up instruction to a task: a running task takes it at its next step; a task that has ended is reopened with its context.',
    arguments: {
      task_id: TASK_ID_TEXT,
      text: 'The instruction to add; a running task takes it at its next step, an ended task is reopened with it.',
    },
  }),
  stop_task: tool({
    kind: 'orchestration',
    args: z.strictObject({ task_id: taskId, reason: z.string().min(1).max(2000) }),
    description: 'Stop a running task; a call it had proposed and not run gets its result. The task ends interrupted.',
    arguments: { task_id: TASK_ID_TEXT, reason: 'Why the task is stopped (it is recorded).' },
  }),
  task_status: tool({
    kind: 'orchestration',
    args: z.strictObject({ task_id: taskId.optional(), wait: z.boolean().optional() }),
    description:
      'The status of one task or of every task: title, status, pending question, outcome and changed paths. With wait, it answers when there is news instead of at once.',
    arguments: {
      task_id: 'One task; omit it for every task.',
      wait: 'Answer once there is news you have not seen here: the task (without task_id: any task) ended or started to wait for an approval.',
    },
  }),
  merge_task: tool({
    kind: 'orchestration',
    writes: true,
    args: z.strictObject({ task_id: taskId }),
    description:
      "Merge a task's verified change into your workspace as one write: it waits for the task to end, needs an approval like apply_patch, and fails with merge_conflict naming the paths when your files changed underneath.",
    arguments: { task_id: TASK_ID_TEXT },
  }),
} as const;

export const TOOLS = { ...BASE_TOOLS, ...ORCHESTRATION_TOOLS } as const;

export type ToolName = keyof typeof TOOLS;
export type OrchestrationToolName = keyof typeof ORCHESTRATION_TOOLS;
/** The tools of one kind. */
export type ToolNameOf<K extends ToolKind> = { [N in ToolName]: (typeof TOOLS)[N]['kind'] extends K ? N : never }[ToolName];

/** The five tools every run has, in the table's order. */
export const TOOL_NAMES = Object.keys(BASE_TOOLS) as ToolName[];
export const ORCHESTRATION_TOOL_NAMES = Object.keys(ORCHESTRATION_TOOLS) as OrchestrationToolName[];

/** The tools a run may call: the five, and the orchestration tools when sub-runs are enabled. */
export function toolNames(orchestrating: boolean): ToolName[] {
  return orchestrating ? [...TOOL_NAMES, ...ORCHESTRATION_TOOL_NAMES] : TOOL_NAMES;
}

export function toolKind(name: ToolName): ToolKind {
  return TOOLS[name].kind;
}

/** Tools that only read the workspace and return at once: a step with one of them needs no server round trip. */
export const READ_ONLY_TOOLS: ReadonlySet<ToolName> = new Set((Object.keys(TOOLS) as ToolName[]).filter((n) => TOOLS[n].kind === 'read'));

export function isOrchestrationTool(name: string): name is OrchestrationToolName {
  return Object.prototype.hasOwnProperty.call(TOOLS, name) && TOOLS[name as ToolName].kind === 'orchestration';
}

export function isToolName(name: string, orchestrating = false): name is ToolName {
  return toolNames(orchestrating).includes(name as ToolName);
}

export type ToolArgsByName = { [N in ToolName]: z.infer<(typeof TOOLS)[N]['args']> };
export type ReadFileArgs = ToolArgsByName['read_file'];
export type SearchArgs = ToolArgsByName['search'];
export type ApplyPatchArgs = ToolArgsByName['apply_patch'];
export type RunTestsArgs = ToolArgsByName['run_tests'];
export type ShowDiffArgs = ToolArgsByName['show_diff'];
export type DispatchTaskArgs = ToolArgsByName['dispatch_task'];

/** A validated call: the name narrows the arguments. */
export type ValidCall = { [N in ToolName]: { call_id: string; name: N; arguments: ToolArgsByName[N] } }[ToolName];

/** The model-facing texts of every tool: its description and one line per argument (a prompt version's tools.json). */
export type ToolTexts = Record<ToolName, { description: string; arguments: Record<string, string> }>;

/** The table's own texts, in its order. */
export function tableTexts(): ToolTexts {
  return Object.fromEntries(
    (Object.keys(TOOLS) as ToolName[]).map((n) => [n, { description: TOOLS[n].description, arguments: { ...TOOLS[n].arguments } }]),
  ) as ToolTexts;
}

/**
 * The tools file of a prompt version (prompts/v<N>/tools.json) as the table writes it: a new
 * version's file is this text; a committed version keeps its bytes (its content is digested into
 * every run that used it), and the newest is checked to be this text.
 */
export function toolsFileText(): string {
  return `${JSON.stringify({ schema_version: 1, tools: tableTexts() }, null, 2)}\n`;
}

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
