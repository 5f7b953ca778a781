/**
 * Test outcomes from a JUnit XML report: the structured source for pytest (`--junitxml`, in
 * the xunit1 family, which names each test's file), Node's test runner (`--test-reporter=junit`)
 * and any runner of the `junit` format. Counts and per-test outcomes come from <testcase>
 * elements, never from the runner's free-text output.
 *
 * A test's id is what its runner would call it, so that the same test has the same id at the
 * base and at the end of a run, and a task's FAIL_TO_PASS / PASS_TO_PASS ids (SWE-bench's) name it:
 * - pytest: the node id, `tests/test_x.py::TestClass::test_name[param]` (a module that failed to
 *   collect is its file, outcome `error`);
 * - node-test: the names of the enclosing suites and the test, joined by ` > ` (Node's report has
 *   no file);
 * - junit: `classname::name`.
 * An id that occurs again in the same report gets ` #2`, ` #3`... in the order the report is read
 * (at each level its test cases, then its suites).
 *
 * The report is hostile (a test process can write it): its size is capped before it is read, ids
 * are cut to a length, and nothing in it is taken for more than a name and an outcome.
 */
import { XMLParser } from 'fast-xml-parser';
import { TEST_ID_MAX, type TestCase, type TestOutcome, type TestsSpec } from '../core/contracts';

export interface JunitCounts {
  discovered: number;
  passed: number;
  /** Failed and errored tests. */
  failed: number;
  /** Skipped and expected-to-fail tests. */
  skipped: number;
  outcomes: Record<TestOutcome, number>;
  failures: { test: string; message: string }[];
  /** Every test with its outcome, in the report's order. */
  tests: TestCase[];
}

const MAX_FAILURES = 20;
const MAX_MESSAGE = 500;

type Node = Record<string, unknown>;

const asArray = (v: unknown): Node[] => (v === undefined ? [] : Array.isArray(v) ? (v as Node[]) : [v as Node]);

function message(node: Node): string {
  const text = typeof node === 'string' ? node : String(node['@_message'] ?? node['#text'] ?? '');
  return text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE)}...` : text;
}

const attr = (node: Node, name: string): string => {
  const v = node[`@_${name}`];
  return v === undefined || v === null ? '' : String(v);
};

/** pytest's node id from an xunit1 testcase: its file, the classes inside it, and the name. */
function pytestId(tc: Node): string {
  const file = attr(tc, 'file');
  const classname = attr(tc, 'classname');
  const name = attr(tc, 'name');
  if (file !== '') {
    const dotted = file.replaceAll('/', '.').replace(/\.py$/, '');
    // A module that could not be collected: its name is the module, its class nothing.
    if (classname === '' && name === dotted) return file;
    if (classname === dotted) return `${file}::${name}`;
    if (classname.startsWith(`${dotted}.`)) return [file, ...classname.slice(dotted.length + 1).split('.'), name].join('::');
  }
  // No file, or a test defined in another module than it runs in: the report's own names.
  return [classname, name].filter((x) => x !== '').join('::');
}

function outcomeOf(tc: Node): TestOutcome {
  if (tc.failure !== undefined) return 'failed';
  if (tc.error !== undefined) return 'error';
  if (tc.skipped !== undefined) {
    const skipped = asArray(tc.skipped)[0];
    return typeof skipped === 'object' && attr(skipped, 'type') === 'pytest.xfail' ? 'xfail' : 'skipped';
  }
  return 'passed';
}

const cut = (id: string) => (id.length > TEST_ID_MAX ? `${id.slice(0, TEST_ID_MAX - 1)}…` : id);

/** Throws when the report is not a JUnit document. */
export function parseJunit(xml: string, format: TestsSpec['format'] = 'junit'): JunitCounts {
  const parser = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '@_', processEntities: true });
  const doc = parser.parse(xml) as Node;
  if (!doc || (doc.testsuites === undefined && doc.testsuite === undefined))
    throw new Error('not a JUnit report: no <testsuites> or <testsuite>');
  const counts: JunitCounts = {
    discovered: 0,
    passed: 0,
    failed: 0,
    skipped: 0,
    outcomes: { passed: 0, failed: 0, error: 0, skipped: 0, xfail: 0 },
    failures: [],
    tests: [],
  };
  const seen = new Map<string, number>();
  const visitSuite = (suite: Node, path: string[]): void => {
    for (const tc of asArray(suite.testcase)) {
      const outcome = outcomeOf(tc);
      const name = attr(tc, 'name');
      const raw =
        format === 'pytest'
          ? pytestId(tc)
          : format === 'node-test'
            ? [...path, name].join(' > ')
            : [attr(tc, 'classname'), name].filter((x) => x !== '').join('::');
      const n = (seen.get(raw) ?? 0) + 1;
      seen.set(raw, n);
      const id = cut(n === 1 ? raw : `${raw} #${n}`);
      counts.tests.push({ id, outcome });
      counts.outcomes[outcome]++;
      counts.discovered++;
      if (outcome === 'failed' || outcome === 'error') {
        counts.failed++;
        if (counts.failures.length < MAX_FAILURES) {
          const problem = [...asArray(tc.failure), ...asArray(tc.error)][0];
          counts.failures.push({ test: id, message: message(problem) });
        }
      } else if (outcome === 'passed') counts.passed++;
      else counts.skipped++;
    }
    for (const child of asArray(suite.testsuite)) {
      // Node's report nests a suite per `describe` (and per test with subtests); pytest's one
      // suite per run names nothing of the tests.
      const name = attr(child, 'name');
      visitSuite(child, format === 'node-test' && name !== '' ? [...path, name] : path);
    }
  };
  const root = doc.testsuites === undefined ? { testsuite: doc.testsuite } : (doc.testsuites as Node | '');
  visitSuite(typeof root === 'object' ? root : {}, []);
  return counts;
}
