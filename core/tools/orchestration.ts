/**
 * The tools of an orchestrating run (SPEC section 12), enabled per run with `subruns`. A task is
 * a child run addressed by the id `dispatch_task` returned; ids are copied, never invented.
 */
import { z } from 'zod';

const taskId = z.string().min(1).max(200).describe('The task_id exactly as dispatch_task returned it.');

export const dispatch_taskArgs = z.strictObject({
  title: z.string().min(1).max(120).describe('A short title for the task (it names the task in the roster).'),
  requirements: z.string().min(1).max(8000).describe('What the user asked that this task must achieve, in the user\'s terms.'),
  known_facts: z
    .array(z.string().min(1).max(2000))
    .max(50)
    .describe('Facts already established, each with the resource it rests on (a path and line, a test id, a call id).'),
  suggestions: z.array(z.string().min(1).max(2000)).max(20).describe('Your own suggestions for how to go about it; the task takes them as advice only.'),
  paths: z.array(z.string().min(1).max(512)).max(100).optional().describe('Repo-relative paths the task may change (a subset of what you may change); default: all you may change.'),
});

export const dispatch_taskDescription =
  'Start a sub-run that works on a task in its own copy of your current workspace. Returns its task_id. ' +
  'Keep the three parts apart: what the user asked (requirements), established facts with their resource ids (known_facts), and your advice (suggestions). ' +
  'When the task ends, its outcome, summary and changed paths reach you as a message; merge its change with merge_task.';

export const message_taskArgs = z.strictObject({
  task_id: taskId,
  text: z.string().min(1).max(4000).describe('The instruction to add; a running task takes it at its next step, an ended task is reopened with it.'),
});

export const message_taskDescription = 'Send a follow-up instruction to a task: a running task takes it at its next step; a task that has ended is reopened with its context.';

export const stop_taskArgs = z.strictObject({
  task_id: taskId,
  reason: z.string().min(1).max(2000).describe('Why the task is stopped (it is recorded).'),
});

export const stop_taskDescription = 'Stop a running task; a call it had proposed and not run gets its result. The task ends interrupted.';

export const task_statusArgs = z.strictObject({
  task_id: taskId.optional().describe('One task; omit it for every task.'),
});

export const task_statusDescription = 'The status of one task or of every task: title, status, pending question, outcome and changed paths.';

export const merge_taskArgs = z.strictObject({ task_id: taskId });

export const merge_taskDescription =
  'Merge a task\'s verified change into your workspace as one write: it waits for the task to end, needs an approval like apply_patch, ' +
  'and fails with merge_conflict naming the paths when your files changed underneath.';
