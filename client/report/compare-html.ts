/**
 * The comparison of two reports as one self-contained page (`eval compare A B --html FILE`): the
 * same view as the command's text, as static HTML (no script, no style or font fetched), that
 * opens from disk. Per fixture and overall, each behaviour's distribution in A and in B and the
 * difference with its interval; a difference outside its interval is marked (class `outside`).
 */
import type { BehaviourComparison, BehaviourGroup, Comparison, Distribution } from './report';

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const DIGITS: Record<string, number> = { pass_rate: 3, tool_error_rate: 3, cost_usd: 4 };
const fmt = (key: string, x: number) => x.toFixed(DIGITS[key] ?? 2);
const signed = (key: string, x: number) => `${x >= 0 ? '+' : ''}${fmt(key, x)}`;

function side(key: string, d: Distribution | null): string {
  if (d === null) return '<td colspan="2">-</td>';
  return `<td class="num">${fmt(key, d.value)} <span class="ci">[${fmt(key, d.low)}, ${fmt(key, d.high)}]</span></td><td class="num range">${fmt(key, d.min)} / ${fmt(key, d.median)} / ${fmt(key, d.max)}</td>`;
}

function row(c: BehaviourComparison): string {
  const diff =
    c.diff === null
      ? `<td>${esc(c.missing ?? '-')}</td>`
      : `<td class="num diff">${signed(c.key, c.diff.value)} <span class="ci">[${signed(c.key, c.diff.low)}, ${signed(c.key, c.diff.high)}]</span></td>`;
  return `<tr class="behaviour${c.outside ? ' outside' : ''}" data-behaviour="${c.key}"><th scope="row">${esc(c.label)}${c.outside ? ' <span class="mark" title="the interval of B - A excludes 0">*</span>' : ''}</th>${side(c.key, c.a)}${side(c.key, c.b)}${diff}</tr>`;
}

function group(g: BehaviourGroup): string {
  const name = g.fixture ?? 'overall';
  return `<section class="group" data-fixture="${esc(name)}"><h3>${esc(name)} <small>(${g.runs} paired runs)</small></h3>
<table><thead><tr><th>behaviour</th><th>A</th><th>A min / median / max</th><th>B</th><th>B min / median / max</th><th>B - A</th></tr></thead>
<tbody>${g.behaviours.map(row).join('')}</tbody></table></section>`;
}

export function comparisonHtml(c: Comparison, names: { a: string; b: string }): string {
  const b = c.behaviours;
  const outside = [b.overall, ...b.per_fixture].flatMap((g) =>
    g.behaviours.filter((x) => x.outside).map((x) => `${g.fixture ?? 'overall'}: ${x.label} ${signed(x.key, x.diff!.value)}`),
  );
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Comparison of two evaluation reports</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin-bottom:1em}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f0f0f0}td.num{font-variant-numeric:tabular-nums;white-space:nowrap}.ci,.range{color:#666}
tr.outside td.diff,tr.outside th{background:#fde8c8;font-weight:bold}.mark{color:#a11}code{font-size:13px}
</style></head>
<body>
<h1>Comparison of two evaluation reports</h1>
<p>A: <code id="report-a">${esc(names.a)}</code><br>B: <code id="report-b">${esc(names.b)}</code></p>
<h2>Runs that flipped</h2>
<p id="flip-summary">${c.runs} paired runs, ${c.flips.length} flipped. McNemar exact p = ${c.mcnemar.p} (completed only in A: ${c.mcnemar.b}, only in B: ${c.mcnemar.c}).</p>
${c.flips.length === 0 ? '' : `<table id="flips"><thead><tr><th></th><th>fixture</th><th>replay</th><th>epoch</th><th>A</th><th>B</th></tr></thead><tbody>${c.flips.map((f) => `<tr class="${f.direction}"><td>${f.direction === 'lost' ? '-' : '+'}</td><td>${esc(f.fixture)}</td><td>${esc(f.replay ?? '')}</td><td>${f.epoch}</td><td>${esc(f.a)}</td><td>${esc(f.b)}</td></tr>`).join('')}</tbody></table>`}
<table id="mcnemar-per-fixture"><thead><tr><th>fixture</th><th>completed only in A</th><th>only in B</th><th>McNemar p</th></tr></thead><tbody>${c.per_fixture.map((f) => `<tr><td>${esc(f.fixture)}</td><td>${f.b}</td><td>${f.c}</td><td>${f.p}</td></tr>`).join('')}</tbody></table>
<h2>Behaviours</h2>
<p>Each behaviour's statistic over the runs (a mean per run; the tool error rate is errors over calls), with its ${Math.round(b.method.confidence * 100)}% interval from ${b.method.resamples} paired bootstrap resamples of the runs within each ${esc(b.method.strata)}. A difference whose interval excludes 0 is marked <span class="mark">*</span>.</p>
<p id="outside-summary">${outside.length === 0 ? 'No difference outside its interval.' : `Differences outside their interval: ${outside.map(esc).join('; ')}.`}</p>
${[b.overall, ...b.per_fixture].map(group).join('\n')}
</body></html>
`;
}
