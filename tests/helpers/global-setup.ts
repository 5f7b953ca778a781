/**
 * Jest's global set-up: the network guard, and the suites as the operator of every worker they
 * start. Child processes (workers, the command line) inherit this environment.
 */
import networkGuard from './network-guard';

export default async function globalSetup(): Promise<void> {
  await networkGuard();
  // The suites run their fixtures on the local backend: they allow it, as an operator would
  // (AGENT_ALLOW_LOCAL). A test of the refusal gives its worker settings without it.
  process.env.AGENT_ALLOW_LOCAL = '1';
}
