/**
 * agentEval: a batch evaluation as a parent workflow. Each (fixture, replay) pair is one child
 * agentRun, approved through a named policy one action at a time; at most `concurrency` children
 * run at once. The result is the SPEC section 7 report.
 */
import * as wf from '@temporalio/workflow';
import type { RunInput, RunRecord } from '../core/contracts';
import { buildReport, type EvalReport } from '../core/report';
import type { RunOutcome } from './agentRun';

export interface EvalInput {
  runs: RunInput[];
  concurrency: number;
}

export const evalProgressQuery = wf.defineQuery<{ total: number; finished: number }>('progress');

export async function agentEval(input: EvalInput): Promise<EvalReport> {
  const records: RunRecord[] = [];
  let next = 0;
  wf.setHandler(evalProgressQuery, () => ({ total: input.runs.length, finished: records.length }));
  const parent = wf.workflowInfo().workflowId;

  const lane = async (): Promise<void> => {
    while (next < input.runs.length) {
      const index = next++;
      const run = input.runs[index];
      const outcome = await wf.executeChild('agentRun', {
        args: [run],
        workflowId: `${parent}/${index + 1}`,
        parentClosePolicy: 'TERMINATE',
      });
      records.push((outcome as RunOutcome).record);
    }
  };
  const lanes = Math.max(1, Math.min(input.concurrency, input.runs.length));
  await Promise.all(Array.from({ length: lanes }, lane));
  return buildReport(records);
}
