/**
 * Test counts from a JUnit XML report: the structured source for both pytest (`--junitxml`) and
 * Node's test runner (`--test-reporter=junit`). Counts come from <testcase> elements, never from
 * the runner's free-text output.
 */
import { XMLParser } from 'fast-xml-parser';

export interface JunitCounts {
  discovered: number;
  passed: number;
  failed: number;
  skipped: number;
  failures: { test: string; message: string }[];
}

const MAX_FAILURES = 20;
const MAX_MESSAGE = 500;

type Node = Record<string, unknown>;

const asArray = (v: unknown): Node[] => (v === undefined ? [] : Array.isArray(v) ? (v as Node[]) : [v as Node]);

function message(node: Node): string {
  const text = typeof node === 'string' ? node : String(node['@_message'] ?? node['#text'] ?? '');
  return text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE)}...` : text;
}

/** Throws when the report is not a JUnit document. */
export function parseJunit(xml: string): JunitCounts {
  const parser = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '@_', processEntities: true });
  const doc = parser.parse(xml) as Node;
  if (!doc || (doc.testsuites === undefined && doc.testsuite === undefined))
    throw new Error('not a JUnit report: no <testsuites> or <testsuite>');
  const counts: JunitCounts = { discovered: 0, passed: 0, failed: 0, skipped: 0, failures: [] };
  const visitSuite = (suite: Node): void => {
    for (const tc of asArray(suite.testcase)) {
      counts.discovered++;
      const problems = [...asArray(tc.failure), ...asArray(tc.error)];
      if (problems.length > 0) {
        counts.failed++;
        if (counts.failures.length < MAX_FAILURES) {
          const name = [tc['@_classname'], tc['@_name']].filter((x) => x !== undefined && x !== '').join('::');
          counts.failures.push({ test: name, message: message(problems[0]) });
        }
      } else if (tc.skipped !== undefined) counts.skipped++;
      else counts.passed++;
    }
    for (const child of asArray(suite.testsuite)) visitSuite(child);
  };
  const root = doc.testsuites === undefined ? { testsuite: doc.testsuite } : (doc.testsuites as Node | '');
  visitSuite(typeof root === 'object' ? root : {});
  return counts;
}
