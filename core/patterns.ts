/**
 * A string that matches a pattern, checked by a refinement rather than `.regex()`. Workflow code
 * parses the run's input and approval Signals with schemas that one worker thread shares between
 * all its workflows, deep-frozen (worker/index.ts, sharedWorkflowModules), and zod's regex check
 * writes its pattern's `lastIndex`, which a frozen RegExp refuses: every pattern a schema that
 * workflows parse can reach goes through here. The message is zod's own unless one is given.
 */
import { z } from 'zod';

export function matching(pattern: RegExp, message = `Invalid string: must match pattern ${pattern}`) {
  return z.string().refine((s) => pattern.test(s), message);
}
