/**
 * Sub-runs (SPEC section 12), the pure part: a task's id, the instruction its child run gets (what
 * the user asked, the facts established, the orchestrator's advice: kept apart), the rules it
 * works under, and the messages its parent sees. Workflow-safe.
 */
import { isWritable, mayCreate } from './policy';
import type { RunSpec, RunStatus } from './contracts';
import type { TaskView } from './run-view';
import type { DispatchTaskArgs } from './tools';

export interface DispatchCall {
  call_id: string;
  name: 'dispatch_task';
  arguments: DispatchTaskArgs;
}

/** A task's id: its parent's workflow id and the dispatch's action id, so a dispatch proposed again names the same task. */
export function taskId(parentWorkflowId: string, actionId: string): string {
  return `${parentWorkflowId}/task-${actionId.slice(0, 16)}`;
}

export function taskInstruction(args: DispatchTaskArgs): string {
  const list = (items: string[]) => (items.length ? items.map((i) => `- ${i}`).join('\n') : '- (none)');
  return [
    `You work on one task of a larger run: ${args.title}`,
    '',
    '## What the user asked (requirements)',
    args.requirements,
    '',
    '## Facts already established (each with the resource it rests on)',
    list(args.known_facts),
    '',
    '## Suggestions from the orchestrating run (advice only: follow the requirements, check the advice)',
    list(args.suggestions),
  ].join('\n');
}

/**
 * The rules a task's run works under: the instruction as its task, and only the paths it was
 * given (for a repository run, whose rules are patterns, those paths exactly).
 */
export function taskFixture<S extends RunSpec>(fixture: S, args: DispatchTaskArgs, paths: string[] | null): S {
  const task = taskInstruction(args);
  if (paths === null) return { ...fixture, task };
  const writable =
    fixture.writable_match === 'pattern' ? paths.filter((p) => isWritable(fixture, p)) : fixture.writable.filter((p) => paths.includes(p));
  const newFiles = paths.filter((p) => !isWritable(fixture, p) && mayCreate(fixture, p));
  return {
    ...fixture,
    task,
    writable,
    new_files: newFiles,
    ...(fixture.writable_match === 'pattern' ? { writable_match: 'exact' as const } : {}),
  };
}

const ENDED: ReadonlySet<TaskView['status']> = new Set<RunStatus>(['completed', 'failed', 'cancelled', 'budget_exhausted']);

/** Replays name tasks by title (`$task:<title>`): the id of the task of that title, when there is one. */
export function withTaskIds<D extends { kind: string; call?: unknown }>(decision: D, tasks: Record<string, string>): D {
  const call = decision.call as { arguments?: Record<string, unknown> } | undefined;
  const id = call?.arguments?.task_id;
  if (decision.kind !== 'tool' || typeof id !== 'string' || !id.startsWith('$task:')) return decision;
  const resolved = tasks[id.slice('$task:'.length)];
  return resolved === undefined
    ? decision
    : ({ ...decision, call: { ...call, arguments: { ...call!.arguments, task_id: resolved } } } as D);
}

export function taskEnded(task: TaskView): boolean {
  return ENDED.has(task.status);
}

/** The message a parent's next decision gets when a task ends. */
export function taskEndedMessage(task: TaskView): string {
  const how = `${task.status}${task.reason ? ` (${task.reason})` : ''}`;
  const changed = task.diff_paths.length ? task.diff_paths.join(', ') : 'nothing';
  const unread = task.unread ? `; it ended before reading ${task.unread} message${task.unread === 1 ? '' : 's'} sent to it` : '';
  return `[task ${task.task_id} "${task.title}" ended ${how}] summary: ${task.summary ?? '(none)'}; changed: ${changed}${unread}${task.status === 'completed' ? '; merge it with merge_task' : ''}`;
}

/** The roster line of a task, as the model sees it each turn. */
export function rosterLine(task: TaskView): string {
  const open = task.pending_path ? `; waits for approval of a write to ${task.pending_path}` : '';
  const ended = taskEnded(task)
    ? `; ${task.merged ? 'merged' : task.status === 'completed' ? 'not merged yet' : 'not mergeable'}; summary: ${task.summary ?? '(none)'}; changed: ${task.diff_paths.join(', ') || 'nothing'}`
    : '';
  return `- ${task.task_id} "${task.title}": ${task.status}${task.reason ? ` (${task.reason})` : ''}${open}${ended}`;
}
