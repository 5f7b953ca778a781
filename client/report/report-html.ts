/**
 * report.html: one self-contained page (data and script inlined, nothing fetched) that opens
 * from disk. A summary, a table of runs that sorts by any column and filters by status, and per
 * run its verdict, every test with its outcome at the base and at the end, its trace, the builds
 * that ran it and a link to the run in the Temporal Web UI. Builds are
 * here and in timings.json, never in report.json, whose bytes depend on the inputs only.
 */
import type { EvalReport } from './report';

export interface HtmlRunExtra {
  /** Seconds from start to close of the run's workflow. */
  duration_s: number | null;
  workflow_id: string;
  /** The run in the Temporal Web UI, when its address is known. */
  web_ui: string | null;
  /** The run's trace, shortened: one line per event. */
  trace: string[] | null;
  /** The builds of the workers that ran it (its state's `builds`); null or absent when unknown. */
  builds?: string[] | null;
  /** The run's OpenTelemetry trace id (kept out of report.json, whose bytes must not vary). */
  trace_id: string | null;
  /** Every test of its verification with its outcome at the base and at the end (null: not on this host, or not verified). */
  tests?: { id: string; base: string | null; end: string | null }[] | null;
}

/** `<` is escaped so no text in the data can close the script element. */
const inline = (value: unknown) => JSON.stringify(value).replace(/</g, '\\u003c');

/** `build`: the build of the command that wrote the report. */
export function reportHtml(report: EvalReport, extras: HtmlRunExtra[], build: string | null = null, title = 'Evaluation report'): string {
  const data = { report, extras, build };
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${title}</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0;cursor:pointer;user-select:none}tr.completed td.status{color:#176117}tr.failed td.status,tr.budget_exhausted td.status{color:#a11}
.cards{display:flex;gap:1em;flex-wrap:wrap;margin-bottom:1em}.card{border:1px solid #ccc;border-radius:6px;padding:.5em 1em}
.card b{display:block;font-size:20px}pre{white-space:pre-wrap;margin:0;font-size:12px;max-height:24em;overflow:auto}
details summary{cursor:pointer}
</style></head>
<body>
<h1>${title}</h1>
<p id="build"></p>
<div class="cards" id="summary"></div>
<div id="pairs"></div>
<p><label>Status <select id="status-filter"><option value="">all</option></select></label>
<span id="shown"></span></p>
<table id="runs"><thead><tr></tr></thead><tbody></tbody></table>
<script id="report-data" type="application/json">${inline(data)}</script>
<script>
(function () {
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var s = data.report.summary;
  var rows = data.report.runs.map(function (r, i) { return { run: r, extra: data.extras[i] || {} }; });
  function el(tag, text, cls) { var e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; }
  function card(label, value) { var c = el('div', null, 'card'); c.appendChild(el('b', value)); c.appendChild(el('span', label)); document.getElementById('summary').appendChild(c); }
  var builds = Array.from(new Set([].concat.apply([], rows.map(function (r) { return r.extra.builds || []; })))).sort();
  document.getElementById('build').textContent = 'Runs ran on build ' + (builds.join(', ') || 'unknown') + (data.build ? '; this report was written by build ' + data.build : '') + '.';
  card('runs', s.runs); card('completed', s.completed); card('not completed', s.failed);
  card('pass rate', s.runs ? (100 * s.completed / s.runs).toFixed(1) + ' %' : '-');
  if (s.flaky) card('flaky', s.flaky.length);
  if (s.per_fixture) {
    var t = el('table'); t.id = 'pairs-table';
    var h = t.insertRow(); ['fixture', 'replay', 'runs', 'pass@1', 'pass@' + s.epochs, 'pass all ' + s.epochs, 'flaky'].forEach(function (x) { h.appendChild(el('th', x)); });
    s.per_fixture.forEach(function (p) {
      var flaky = s.flaky.filter(function (f) { return f.fixture === p.fixture && f.replay === p.replay; })[0];
      var tr = t.insertRow();
      [p.fixture, p.replay, p.n, p.pass_at_1, p.pass_at_k, p.pass_all_k ? 'yes' : 'no', flaky ? flaky.outcomes.join(' vs ') : ''].forEach(function (x) { tr.appendChild(el('td', x)); });
    });
    document.getElementById('pairs').appendChild(el('h2', 'Per fixture and replay')); document.getElementById('pairs').appendChild(t);
  }
  var columns = [
    ['fixture', function (r) { return r.run.fixture; }],
    ['replay', function (r) { return r.run.replay; }],
    ['epoch', function (r) { return r.run.epoch; }],
    ['status', function (r) { return r.run.status; }],
    ['reason', function (r) { return r.run.reason || ''; }],
    ['writes', function (r) { return r.run.writes; }],
    ['tests', function (r) { var t = r.run.candidate_tests; return t ? t.passed + '/' + t.discovered : '-'; }],
    ['verdict', function (r) { var v = r.run.verdict; if (!v) return '-'; var parts = ['by ' + v.decided_by];
      [['FAIL_TO_PASS failing', v.fail_to_pass ? v.fail_to_pass.failed : []], ['lost', v.tests_lost], ['regressed', v.tests_regressed], ['new failing', v.new_tests_failed], ['flaky', v.flaky], ['fixed', v.fixed_tests], ['tampered', v.verification_tampered], ['test config changed', v.test_config_changed]]
        .forEach(function (p) { if (p[1].length) parts.push(p[0] + ': ' + p[1].join(', ')); });
      return parts.join('; '); }],
    ['acceptance', function (r) { var a = r.run.acceptance; return a ? a.passed + '/' + a.total : '-'; }],
    ['duration (s)', function (r) { return r.extra.duration_s === null || r.extra.duration_s === undefined ? '' : r.extra.duration_s; }],
    ['build', function (r) { return (r.extra.builds || []).join(', '); }],
  ];
  var head = document.querySelector('#runs thead tr');
  var sortBy = 0, ascending = true;
  columns.forEach(function (c, i) {
    var th = el('th', c[0]); th.dataset.column = c[0];
    th.onclick = function () { ascending = sortBy === i ? !ascending : true; sortBy = i; render(); };
    head.appendChild(th);
  });
  head.appendChild(el('th', 'trace and run'));
  var filter = document.getElementById('status-filter');
  Array.from(new Set(rows.map(function (r) { return r.run.status; }))).sort().forEach(function (st) { var o = el('option', st); o.value = st; filter.appendChild(o); });
  filter.onchange = render;
  function render() {
    var body = document.querySelector('#runs tbody'); body.textContent = '';
    var shown = rows.filter(function (r) { return !filter.value || r.run.status === filter.value; });
    var get = columns[sortBy][1];
    shown.sort(function (a, b) { var x = get(a), y = get(b); var c = x < y ? -1 : x > y ? 1 : 0; return ascending ? c : -c; });
    shown.forEach(function (r) {
      var tr = body.insertRow(); tr.className = 'run ' + r.run.status;
      columns.forEach(function (c) { tr.appendChild(el('td', c[1](r), c[0] === 'status' ? 'status' : null)); });
      var td = el('td'); var d = el('details'); d.appendChild(el('summary', (r.extra.trace ? r.extra.trace.length + ' events' : 'trace not on this host')));
      if (r.extra.trace) d.appendChild(el('pre', r.extra.trace.join('\\n')));
      td.appendChild(d);
      if (r.extra.tests) {
        var dt = el('details', null, 'tests'); dt.appendChild(el('summary', r.extra.tests.length + ' tests (base -> end)'));
        dt.appendChild(el('pre', r.extra.tests.map(function (t) { return (t.base || '-') + ' -> ' + (t.end || '-') + '  ' + t.id; }).join('\\n')));
        td.appendChild(dt);
      }
      if (r.extra.web_ui) { var a = el('a', r.extra.workflow_id); a.href = r.extra.web_ui; a.target = '_blank'; td.appendChild(a); } else td.appendChild(el('span', r.extra.workflow_id));
      if (r.extra.trace_id) { td.appendChild(el('br')); var tid = el('code', 'trace ' + r.extra.trace_id, 'trace-id'); tid.title = 'the OpenTelemetry trace of this run'; td.appendChild(tid); }
      tr.appendChild(td);
    });
    document.getElementById('shown').textContent = shown.length + ' of ' + rows.length + ' runs shown';
  }
  render();
})();
</script>
</body></html>
`;
}
