/**
 * Kept only for client/cli.ts and client/eval.ts until they import host/settings.ts, where the
 * settings now live (the floor both worker/ and client/ import). Remove it then.
 */
export { PROJECT_ROOT, DEFAULT_TASK_QUEUE, readSettings, replayTrusted, type Settings } from '../host/settings';
