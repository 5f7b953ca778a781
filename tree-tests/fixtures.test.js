'use strict';
// Checks of this repository that need nothing but its committed tree: Node's own test runner, no
// node_modules, no build. They are the test command of .coding-agent.json, so a repository run on
// this checkout (README, "Your own repository") has tests that run in any sandbox with node.
const test = require('node:test');
const assert = require('node:assert');
const { existsSync, readdirSync, readFileSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
const fixtures = readdirSync(join(root, 'fixtures')).filter((d) => existsSync(join(root, 'fixtures', d, 'fixture.json')));
const fixture = (id) => JSON.parse(readFileSync(join(root, 'fixtures', id, 'fixture.json'), 'utf8'));

test('there are fixtures', () => {
  assert.ok(fixtures.length >= 12, `only ${fixtures.length} fixtures`);
});

test('every fixture is named after its folder', () => {
  for (const id of fixtures) assert.strictEqual(fixture(id).id, id);
});

test('every fixture has a canonical replay and at least one wrong fix', () => {
  for (const id of fixtures) {
    const replays = readdirSync(join(root, 'fixtures', id, 'replays'));
    assert.ok(replays.includes('canonical.json'), `${id} has no canonical replay`);
    assert.ok(replays.filter((r) => r.endsWith('.json')).length >= 2, `${id} has no wrong fix`);
  }
});

test('every fixture keeps expected.json beside its acceptance runner', () => {
  for (const id of fixtures) {
    const expected = JSON.parse(readFileSync(join(root, 'fixtures', id, 'acceptance', 'expected.json'), 'utf8'));
    assert.strictEqual(expected.schema_version, 1);
    assert.ok(Object.keys(expected.cases).length > 0, `${id} has no acceptance case`);
  }
});
