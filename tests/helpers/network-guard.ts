/**
 * Jest's global set-up: no test can reach a model provider's public endpoint by accident. The
 * SDKs fall back to OPENAI_BASE_URL / ANTHROPIC_BASE_URL when an endpoint names no URL: both point
 * at a loopback port that nothing listens on (a test may listen there to see what arrives), and
 * the keys the SDKs would read from the environment are removed. Child processes (workers, the
 * command line) inherit this environment.
 */
import { createServer } from 'node:net';

/** The variable that tells tests the guard port. */
export const GUARD_PORT_ENV = 'AGENT_TEST_GUARD_PORT';

const REMOVED = [
  'OPENAI_API_KEY',
  'OPENAI_ADMIN_KEY',
  'OPENAI_ORG_ID',
  'OPENAI_PROJECT_ID',
  'OPENAI_CUSTOM_HEADERS',
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_AUTH_TOKEN',
  'ANTHROPIC_CUSTOM_HEADERS',
];

export default async function networkGuard(): Promise<void> {
  const port = await new Promise<number>((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
  process.env[GUARD_PORT_ENV] = String(port);
  process.env.OPENAI_BASE_URL = `http://127.0.0.1:${port}/v1`;
  process.env.ANTHROPIC_BASE_URL = `http://127.0.0.1:${port}`;
  for (const name of REMOVED) delete process.env[name];
}
