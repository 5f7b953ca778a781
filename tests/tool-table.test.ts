/**
 * The tool table (core/tools.ts) drives every list and dispatcher of a tool: validation, the prompt
 * version's tools file, the providers' schemas, the handlers (tools/index.ts) and the workflow's
 * orchestration carriers (workflows/subruns.ts). A tool missing from one of them, or one of them
 * holding a tool the table lacks, fails here: at run time by comparison with the table, and at
 * compile time, shown by compiling the real files with one entry taken out or added.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { validateCall } from '../core/validate';
import { READ_ONLY_TOOLS, tableTexts, toolNames, toolsFileText, TOOLS, type ToolName } from '../core/tools';
import { loadPrompt, promptVersions } from '../models/prompt';
import { anthropicTools, openaiTools } from '../models/tool-schemas';
import { HANDLERS } from '../tools';
import { BUILD_PROMPTS_DIR, PROJECT_ROOT } from '../host/settings';

const NAMES = Object.keys(TOOLS) as ToolName[];

describe('the tool table', () => {
  it('is what the handlers, validation, the read-only set, the prompt and the providers list', () => {
    // The handlers: one per tool, shaped by the tool's kind.
    expect(Object.keys(HANDLERS)).toEqual(NAMES);
    const shape = (h: unknown) => (typeof h === 'function' ? 'run' : h === 'workflow' ? 'workflow' : 'prepare+write');
    const byKind = { read: 'run', test: 'run', write: 'prepare+write', orchestration: 'workflow' } as const;
    // An orchestration tool whose row says `writes: true` (merge_task): its halves are in the map.
    const expected = (name: ToolName) =>
      (TOOLS[name] as { writes?: boolean }).writes === true ? 'prepare+write' : byKind[TOOLS[name].kind];
    for (const name of NAMES) expect([name, shape(HANDLERS[name])]).toEqual([name, expected(name)]);
    expect([...READ_ONLY_TOOLS]).toEqual(['read_file', 'search', 'show_diff']);

    // Validation knows exactly the table's tools: a listed name gets to its arguments, another is unknown.
    for (const orchestrating of [false, true]) {
      for (const name of toolNames(orchestrating))
        expect([name, validateCall({ call_id: 'c', name, arguments: { nope: 1 } }, 'c', orchestrating)]).toMatchObject([
          name,
          { ok: false, result: { error: 'invalid_fields' } },
        ]);
      expect(validateCall({ call_id: 'c', name: 'shell', arguments: {} }, 'c', orchestrating)).toMatchObject({
        ok: false,
        result: { error: 'unknown_tool', data: { tools: toolNames(orchestrating) } },
      });
    }
    expect(toolNames(true)).toEqual(NAMES);

    // The prompt's tool list and the providers' schemas, with and without sub-runs.
    const prompt = loadPrompt(BUILD_PROMPTS_DIR);
    expect(Object.keys(prompt.texts.tools)).toEqual(NAMES);
    for (const orchestrating of [false, true]) {
      const openai = openaiTools(prompt, orchestrating) as { function: { name: string; description: string } }[];
      const anthropic = anthropicTools(prompt, orchestrating) as { name: string; description: string }[];
      expect(openai.map((t) => t.function.name)).toEqual(toolNames(orchestrating));
      expect(anthropic.map((t) => t.name)).toEqual(toolNames(orchestrating));
      expect(anthropic.map((t) => t.description)).toEqual(toolNames(orchestrating).map((n) => TOOLS[n].description));
    }
  });

  it("is the newest prompt version's tools file, byte for byte; v1 keeps its content and digest", () => {
    const dir = join(PROJECT_ROOT, 'prompts');
    const versions = promptVersions(dir);
    const newest = versions[versions.length - 1];
    // A text changed in the table needs a new version (a committed one's content is digested into its runs' records).
    expect(readFileSync(join(dir, newest, 'tools.json'), 'utf8')).toBe(toolsFileText());
    expect(loadPrompt(dir, newest).texts.tools).toEqual(tableTexts());
    // The digest every live run of v1 recorded.
    expect(loadPrompt(dir, 'v1').ref.digest).toBe('245fbe010604ce7048797357e0d47f5ffead3ae2d9d8649f86dafbb3e143d390');
  });
});

/** The project's compiler options, checking only (no output, no build info). */
function compilerOptions(): ts.CompilerOptions {
  const config = ts.readConfigFile(join(PROJECT_ROOT, 'tsconfig.json'), ts.sys.readFile);
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, PROJECT_ROOT);
  return { ...parsed.options, noEmit: true, incremental: false, tsBuildInfoFile: undefined };
}

describe('the compiler holds the table and its dispatchers together', () => {
  const options = compilerOptions();
  const cache = new Map<string, ts.SourceFile | undefined>();
  let previous: ts.Program | undefined;

  /** The diagnostics of `seen` (by default `file`, and what it imports) with `from` replaced by `to` in `file`. */
  function diagnostics(file: string, from: string, to: string, seen = file): string[] {
    const target = join(PROJECT_ROOT, file);
    const checkedFile = join(PROJECT_ROOT, seen);
    const text = readFileSync(target, 'utf8');
    expect(text.split(from)).toHaveLength(2);
    const host = ts.createCompilerHost(options);
    const read = host.getSourceFile.bind(host);
    host.getSourceFile = (name, language) => {
      if (name === target) return ts.createSourceFile(name, text.replace(from, to), language);
      if (!cache.has(name)) cache.set(name, read(name, language));
      return cache.get(name);
    };
    previous = ts.createProgram({ rootNames: [checkedFile], options, host, oldProgram: previous });
    // The seen file's own diagnostics: the checker reads what it imports as far as it needs to.
    const checked = [
      ...previous.getSyntacticDiagnostics(previous.getSourceFile(checkedFile)),
      ...previous.getSemanticDiagnostics(previous.getSourceFile(checkedFile)),
    ];
    // What a removal leaves unused (6133, "declared but never read") follows from the error itself.
    return checked.filter((d) => d.code !== 6133).map((d) => ts.flattenDiagnosticMessageText(d.messageText, ' '));
  }

  const HANDLER = '  show_diff: (ctx, callId) => showDiff(ctx, callId),\n';
  const CARRIER = '    stop_task: (call) => this.stop(call),\n';
  it.each([
    ['the handlers as they are', 'tools/index.ts', HANDLER, HANDLER, []],
    ['a tool without a handler', 'tools/index.ts', HANDLER, '', [/Property 'show_diff' is missing in type/]],
    [
      'a handler without a tool',
      'tools/index.ts',
      "  stop_task: 'workflow',\n",
      "  stop_task: 'workflow',\n  shell: 'workflow',\n",
      [/'shell' does not exist in type 'ToolHandlers'/],
    ],
    [
      'a handler of the wrong kind',
      'tools/index.ts',
      HANDLER,
      "  show_diff: 'workflow',\n",
      [/not assignable to type 'RunHandler<"show_diff">'/],
    ],
    [
      'merge_task without its write halves',
      'tools/index.ts',
      '  merge_task: { prepare: prepareMerge, write: writeMerge },\n',
      "  merge_task: 'workflow',\n",
      [/not assignable to type 'MergeHandler'/],
    ],
    ['the carriers as they are', 'workflows/subruns.ts', CARRIER, CARRIER, []],
    ['an orchestration tool without a carrier', 'workflows/subruns.ts', CARRIER, '', [/Property 'stop_task' is missing in type/]],
    [
      'an argument without its text',
      'core/tools.ts',
      "      max_results: 'Maximum number of matching lines, 1-200. Default 50.',\n",
      '',
      [/Property 'max_results' is missing in type/],
    ],
  ] as const)('%s', (_case, file, from, to, expected) => {
    const found = diagnostics(file, from, to);
    expect(found).toHaveLength(expected.length);
    expected.forEach((pattern, i) => expect(found[i]).toMatch(pattern));
  });

  it("gives write halves only to a row that says it writes (merge_task's `writes: true` taken out)", () => {
    const found = diagnostics(
      'core/tools.ts',
      "    kind: 'orchestration',\n    writes: true,\n",
      "    kind: 'orchestration',\n",
      'tools/index.ts',
    );
    expect(found).toHaveLength(1);
    expect(found[0]).toMatch(/not assignable to type '"workflow"'/);
  });
});
