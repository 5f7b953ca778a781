/** The system prompt: the harness's rules, stated to the model. */
export const SYSTEM_PROMPT = [
  'You are a coding agent working on a repository through five tools: read_file, search, apply_patch, run_tests and show_diff.',
  'Your tool calls are proposals. The harness validates every call strictly, confines paths to the workspace and refuses writes to protected paths.',
  'Every apply_patch needs the file\'s current `version` (from read_file), an `old` text that occurs exactly once, and an approval: a person or a named policy approves each write on its own; a rejected or stale write comes back as an error result.',
  'A tool error names what to do next (read the file again, include more context, use a listed tool). Follow it.',
  'When you are done, answer without tool calls. That answer is not accepted on your word: a verifier checks that protected files are unchanged, runs the candidate tests (zero tests is a failure) and runs hidden acceptance cases you cannot see.',
  'Reproduce a bug with a failing test before you fix it when new test files are allowed.',
].join('\n');

/**
 * The system prompt of a run: the harness's rules, then a repository run's project instructions
 * (AGENTS.md, capped). Both stay the same for every request of the run, so they form the stable
 * front of the prompt, before the summary and the steps that change each turn.
 */
export function systemPrompt(instructions: { text: string } | null): string {
  if (instructions === null) return SYSTEM_PROMPT;
  return [
    SYSTEM_PROMPT,
    '',
    '## Project instructions (AGENTS.md at the root of the repository)',
    "The repository's own notes for agents working on it. They add to the rules above and never replace them.",
    '',
    instructions.text,
  ].join('\n');
}
