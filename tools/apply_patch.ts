/**
 * apply_patch in two halves. `preparePatch` has no side effect: it checks the call against the
 * workspace and returns the action with its digests, to be approved. `writePatch` performs the
 * approved action exactly once, keyed by action_id, with the three-state recovery of SPEC 4. A
 * write is whole or not made: with no space left the target stays as it was (see writeAndReceipt).
 */
import { writeFileSync } from 'node:fs';
import { errorResult, type PendingAction } from '../core/contracts';
import { isWritable, mayCreate } from '../core/policy';
import type { ApplyPatchArgs } from '../core/tools';
import { digestHostile, readHostile, readRegular } from '../workspace/hostile-read';
import { digestJson, sha256 } from '../host/digest';
import { asDiskFull, DiskFullError } from '../host/disk';
import { faultPoint } from '../host/faults';
import { fileMode } from '../workspace/diff';
import { resolveInWorkspace } from '../workspace/fs-safety';
import { Replacement } from '../workspace/replace';
import { offThread } from '../workspace/thread';
import type { Limits } from '../core/limits';
import { cutDiff, decodeText, type ToolContext } from './context';
import type { PrepareOutcome, WriteOutcome } from '../core/activities';

export function actionId(runId: string, args: ApplyPatchArgs): string {
  return digestJson({ run_id: runId, name: 'apply_patch', arguments: args });
}

function countOccurrences(text: string, needle: string): number {
  let count = 0;
  // Overlapping occurrences count too: "aa" occurs twice in "aaa".
  for (let i = text.indexOf(needle); i !== -1; i = text.indexOf(needle, i + 1)) if (++count > 1) break;
  return count;
}

export async function preparePatch(ctx: Omit<ToolContext, 'backend'>, callId: string, args: ApplyPatchArgs): Promise<PrepareOutcome> {
  const call = { key: ctx.paths.workspace };
  const inBaseline = () => offThread('inBaseline', [ctx.paths, args.path], call);
  const reject = (code: Parameters<typeof errorResult>[1], data: Record<string, unknown>): PrepareOutcome => ({
    kind: 'rejected',
    result: errorResult(callId, code, { path: args.path, ...data }),
  });
  const id = actionId(ctx.runId, args);
  const receipt = ctx.ledger.receipt(id);
  if (receipt) return { kind: 'already_written', action_id: id, before: receipt.before, after: receipt.after };

  if (args.old === args.new) return reject('no_op', { reason: 'old and new are identical' });
  if (Buffer.byteLength(args.new) > ctx.limits.patchBytes)
    return reject('too_large', { reason: 'new text is over the cap', limit: ctx.limits.patchBytes });

  const resolved = resolveInWorkspace(ctx.paths.workspace, args.path);
  if (!resolved.ok) return reject(resolved.error, { reason: resolved.reason });
  if (resolved.stat?.isDirectory()) return reject('invalid_fields', { reason: 'path is a folder' });

  let current: string;
  let before: string;
  if (args.version === 'absent') {
    if (resolved.stat !== null) return reject('stale_version', { reason: 'the file exists; read it and pass its version' });
    if (args.old !== '') return reject('invalid_fields', { reason: 'old must be empty when creating a file' });
    const isNewFilePattern = mayCreate(ctx.fixture, args.path);
    if (isNewFilePattern && !isWritable(ctx.fixture, args.path) && (await inBaseline())) {
      return reject('write_denied', { reason: 'the path belongs to the starting repository and is protected' });
    }
    current = '';
    before = 'absent';
  } else {
    if (resolved.stat === null) return reject('not_found', { reason: `${args.path} does not exist; use version "absent" to create it` });
    if (!isWritable(ctx.fixture, args.path) && (await inBaseline())) {
      return reject('write_denied', { reason: 'the path belongs to the starting repository and is protected' });
    }
    if (resolved.stat.size > ctx.limits.maxFileBytes)
      return reject('too_large', { size: resolved.stat.size, limit: ctx.limits.maxFileBytes });
    const read = readHostile(resolved.abs, ctx.limits.maxFileBytes, args.path);
    if (!read.ok) return reject(read.kind === 'too_large' ? 'too_large' : 'path_denied', { reason: read.detail });
    const bytes = read.bytes;
    before = sha256(bytes);
    if (before !== args.version) return reject('stale_version', { current_version: before });
    const text = decodeText(bytes);
    if (text === null) return reject('binary_file', {});
    if (args.old === '') return reject('invalid_fields', { reason: 'old must not be empty when changing a file' });
    const n = countOccurrences(text, args.old);
    if (n === 0) return reject('no_match', { reason: 'old text not found; read the file again' });
    if (n > 1) return reject('non_unique_match', { reason: 'old text occurs more than once; include more surrounding context' });
    current = text;
  }

  const next = args.version === 'absent' ? args.new : current.replace(args.old, () => args.new);
  const workspace = await offThread('state', [ctx.paths.workspace], call);
  const over = overWorkspaceLimit(ctx.limits, workspace.bytes, Buffer.byteLength(next) - Buffer.byteLength(current));
  if (over) return reject('too_large', over);
  // A patch keeps the file's mode; a new file is made plain (writeAndReceipt).
  const mode = fileMode(((resolved.stat?.mode ?? 0) & 0o111) !== 0);
  const diff = await offThread('fileDiff', [args.path, before === 'absent' ? null : { text: current, mode }, { text: next, mode }], call);
  const shown = cutDiff(diff, ctx.limits);
  return {
    kind: 'prepared',
    whole_diff: shown.whole,
    action: {
      action_id: id,
      path: args.path,
      before,
      after: sha256(next),
      args_digest: digestJson(args),
      workspace_digest: workspace.digest,
      diff: shown.diff,
      diff_truncated: shown.diff_truncated,
    },
  };
}

/**
 * Why a write that grows the workspace by `growth` bytes is refused, or null: a workspace may not
 * grow past `limits.workspaceBytes` (one already over it, its base tree, may not grow at all).
 */
export function overWorkspaceLimit(
  limits: Limits,
  bytes: number,
  growth: number,
): { reason: string; workspace_bytes: number; limit: number } | null {
  if (growth <= 0 || bytes + growth <= limits.workspaceBytes) return null;
  return {
    reason: `the workspace would grow to ${bytes + growth} bytes, over its limit of ${limits.workspaceBytes} bytes (the workspace limit): write less, or remove files first`,
    workspace_bytes: bytes + growth,
    limit: limits.workspaceBytes,
  };
}

/** The target's digest, `absent`, or what it is instead of a regular file (never equal to a digest). */
export function currentDigest(abs: string, path: string): string {
  const read = digestHostile(abs, path);
  if (read.ok) return read.digest;
  return read.kind === 'missing' ? 'absent' : read.detail;
}

/**
 * Performs an approved action. Safe to call any number of times for the same action: the ledger
 * intent marks that a write may have started, the receipt that it finished. `keep` gets the bytes
 * about to be written before the intent is recorded, so whatever has an intent has its content kept.
 */
export async function writePatch(
  ctx: Omit<ToolContext, 'backend'>,
  action: PendingAction,
  args: ApplyPatchArgs,
  keep: (bytes: Buffer) => void = () => undefined,
): Promise<WriteOutcome> {
  const digestNow = () => offThread('digest', [ctx.paths.workspace], { key: ctx.paths.workspace });
  const receipt = ctx.ledger.receipt(action.action_id);
  if (receipt) return { kind: 'already_recorded', recovered: receipt.recovered };
  // An earlier attempt's kept link to the old file would count as a second hard link.
  const replacement = new Replacement(ctx.paths.tmp, action.action_id);
  replacement.clear();

  faultPoint('before_write');
  const resolved = resolveInWorkspace(ctx.paths.workspace, action.path);
  if (!resolved.ok) {
    // A link or a vanished folder appeared on the path after the approval.
    return ctx.ledger.hasIntent(action.action_id)
      ? { kind: 'recovery_uncertain', current: resolved.reason }
      : { kind: 'approval_stale', workspace_digest: await digestNow() };
  }
  const current = currentDigest(resolved.abs, action.path);

  if (ctx.ledger.hasIntent(action.action_id)) {
    // Recovery: a previous attempt may have written. Only the two known states are safe.
    if (current === action.after) {
      ctx.ledger.recordReceipt({ ...action, run_id: ctx.runId, recovered: true });
      return { kind: 'receipt_recovered', recovered: true };
    }
    if (current !== action.before) return { kind: 'recovery_uncertain', current };
  }
  const now = await digestNow();
  if (now !== action.workspace_digest) return { kind: 'approval_stale', workspace_digest: now };

  const text = action.before === 'absent' ? '' : readRegular(resolved.abs, Number.MAX_SAFE_INTEGER, action.path).toString('utf8');
  const next = action.before === 'absent' ? args.new : text.replace(args.old, () => args.new);
  if (sha256(next) !== action.after) return { kind: 'recovery_uncertain', current };

  keep(Buffer.from(next, 'utf8'));
  ctx.ledger.recordIntent(ctx.runId, action);
  writeAndReceipt(ctx, replacement, action, resolved.abs, resolved.stat ? resolved.stat.mode & 0o777 : 0o644, next);
  return { kind: 'written', recovered: false };
}

/**
 * The write itself (its intent is recorded): a temporary file in the control folder, synced and
 * renamed over the target, then the receipt. It is whole or not made: when there is no space for
 * the temporary file, the rename or the receipt, the target is put back as it was, the ledger
 * notes the attempt as not written, and a DiskFullError names what was full.
 */
function writeAndReceipt(
  ctx: Omit<ToolContext, 'backend'>,
  replacement: Replacement,
  action: PendingAction,
  target: string,
  mode: number,
  next: string,
): void {
  try {
    const tmp = replacement.temporary('patch');
    Replacement.fill(tmp, mode, (fd) => writeFileSync(fd, next));
    faultPoint('after_temp_write');
    replacement.put(tmp, target, action.before !== 'absent', 'patch');
    faultPoint('after_rename');
    ctx.ledger.recordReceipt({ ...action, run_id: ctx.runId, recovered: false });
  } catch (err) {
    throw notWritten(ctx, replacement, action, asDiskFull(err, 'workspace', `writing ${action.path} through the control folder`));
  }
  replacement.commit();
  faultPoint('after_receipt');
}

/**
 * After a failed attempt: when the disk was full, every target is put back and the ledger notes
 * the attempt as not written (a ledger that is full itself cannot; its intent alone then says so,
 * with the targets at `before`). Returns the error to throw.
 */
export function notWritten(ctx: Omit<ToolContext, 'backend'>, replacement: Replacement, action: PendingAction, err: unknown): unknown {
  if (!(err instanceof DiskFullError)) return err;
  replacement.putBack();
  try {
    ctx.ledger.recordNotWritten(ctx.runId, { action_id: action.action_id, reason: 'disk_full', detail: err.message });
  } catch (again) {
    if (!(again instanceof DiskFullError)) throw again;
  }
  return err;
}
