/**
 * The tools of an orchestrating run (SPEC section 12), enabled per run with `subruns`. A task is
 * a child run addressed by the id `dispatch_task` returned; ids are copied, never invented.
 */
import { z } from 'zod';

const taskId = z.string().min(1).max(200);

export const dispatch_taskArgs = z.strictObject({
  title: z.string().min(1).max(120),
  requirements: z.string().min(1).max(8000),
  known_facts: z.array(z.string().min(1).max(2000)).max(50),
  suggestions: z.array(z.string().min(1).max(2000)).max(20),
  paths: z.array(z.string().min(1).max(512)).max(100).optional(),
});

export const message_taskArgs = z.strictObject({
  task_id: taskId,
  text: z.string().min(1).max(4000),
});

export const stop_taskArgs = z.strictObject({
  task_id: taskId,
  reason: z.string().min(1).max(2000),
});

export const task_statusArgs = z.strictObject({
  task_id: taskId.optional(),
  wait: z.boolean().optional(),
});

export const merge_taskArgs = z.strictObject({ task_id: taskId });
