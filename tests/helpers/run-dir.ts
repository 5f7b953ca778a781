/** Run folders, temp folders and the project's paths: shared with the scripts (scripts/support/run-dir.ts). */
export * from '../../scripts/support/run-dir';
