/**
 * A test or acceptance process run with its by-products undone (byproducts.ts): the state to go
 * back to is written down before it, and the workspace made that state again after it, whether
 * it ended, timed out, was cancelled or threw. The walks, copies and removals run in a workspace
 * thread (thread.ts).
 */
import type { Undone } from './byproducts';
import { offThread } from './thread';
import type { RunPaths } from './workspace';

/**
 * Runs `run` and puts the workspace back as it was before it; returns what the process returned
 * and what was undone (null: nothing changed). `run` is told how many entries the workspace had,
 * the base of the bound on what a process may leave.
 */
export async function withUndo<T>(
  paths: RunPaths,
  run: (entries: number) => Promise<T>,
  onProgress?: () => void,
): Promise<{ result: T; undone: Undone | null }> {
  const call = { key: paths.workspace, onProgress };
  const { earlier, entries } = await offThread('guard', [paths], call);
  let result: T;
  try {
    result = await run(entries);
  } catch (err) {
    await offThread('restore', [paths, []], call);
    throw err;
  }
  return { result, undone: await offThread('restore', [paths, earlier], call) };
}
