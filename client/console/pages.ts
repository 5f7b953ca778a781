/**
 * The console's pages, rendered on the server as HTML: the login form, the list of runs and the
 * card of a run's pending action. Every value is escaped where it is placed. The list and the card
 * carry the console's own script (live-script.ts), which follows their runs' event streams; every
 * other page runs none.
 */
import type { PendingActionView, RunView } from '../../core/run-view';
import type { TraceEvent } from '../../core/trace';
import { LIVE_SCRIPT } from './live-script';

const esc = (value: unknown): string =>
  String(value ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

const STYLE = `body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;max-width:70em}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0}code,.digest{font-family:ui-monospace,monospace;font-size:12px;word-break:break-all}
pre.diff{background:#fafafa;border:1px solid #ddd;padding:.5em;overflow:auto}pre.diff span{display:block}
.add{background:#e6ffec;color:#116329}.del{background:#ffebe9;color:#82071e}.hunk{color:#6639ba}
.notice{border:1px solid #d4a72c;background:#fff8c5;padding:.5em 1em;border-radius:6px}
.ok{border-color:#1a7f37;background:#dafbe1}dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:600}
button{font-size:14px;padding:.3em 1em;margin-right:.5em}.who{float:right}.who button{margin:0 0 0 .5em}ol.trace{font-size:12px;font-family:ui-monospace,monospace}`;

function page(title: string, body: string, o: { refreshS?: number; live?: boolean } = {}): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>${o.refreshS ? `<meta http-equiv="refresh" content="${o.refreshS}">` : ''}
<style>${STYLE}</style></head>
<body>${body}${o.live ? `<script>${LIVE_SCRIPT}</script>` : ''}</body></html>
`;
}

/** The address of a run's event stream. */
const eventsLink = (id: string) => `/api/runs/${encodeURIComponent(id)}/events`;

/**
 * The sign-in form. With a one-time code (from the link the console printed) it asks only for a
 * name and posts the code back; without one it asks for the console token, typed by hand. The
 * token is never placed in a page.
 */
export function loginPage(o: { code?: string; error?: string } = {}): string {
  const credential = o.code
    ? `<input type="hidden" name="code" value="${esc(o.code)}"><p>This sign-in link works once, within a few minutes of the console printing it.</p>`
    : `<p><label>Console token (the first line of the console's token file)
<input type="password" name="token" id="token" required autocomplete="off" maxlength="200"></label></p>`;
  return page(
    'Sign in: agent console',
    `<h1>Agent console</h1>${o.error ? `<p class="notice" id="error">${esc(o.error)}</p>` : ''}
<form method="post" action="/login" id="sign-in">${credential}
<p><label>Your name (recorded as <code>console:&lt;name&gt;</code> with each approval)
<input name="name" id="name" required pattern="[A-Za-z0-9_.\\-]{1,64}" maxlength="64" autofocus></label></p>
<p><button type="submit" id="sign-in-button">Sign in</button></p></form>`,
  );
}

/** Who is signed in, and the sign-out button (a POST carrying the session's CSRF token). */
function signedIn(user: string, csrf: string): string {
  return `<form method="post" action="/logout" id="sign-out" class="who">Signed in as <code>console:${esc(user)}</code>.
<input type="hidden" name="csrf" value="${esc(csrf)}"> <button type="submit" id="sign-out-button">Sign out</button></form>`;
}

export function signInFirstPage(text: string): string {
  return page('Sign in first', `<h1>Sign in first</h1><p>${esc(text)}</p><p><a href="/login">Sign in</a></p>`);
}

export function messagePage(title: string, text: string, back?: { href: string; text: string }): string {
  return page(
    title,
    `<h1>${esc(title)}</h1><p id="message">${esc(text)}</p>${back ? `<p><a id="back" href="${esc(back.href)}">${esc(back.text)}</a></p>` : ''}`,
  );
}

export interface PendingRow {
  workflow_id: string;
  fixture: string | null;
  started: Date | null;
  path: string | null;
  counters: RunView['counters'] | null;
  /** The orchestrating run this run does a task for, when it is one. */
  parent: string | null;
  /** The pending action's id, and the newest trace event when the row was read (the row follows the stream from there). */
  action_id: string | null;
  newest: number | null;
}

export interface FinishedRow {
  workflow_id: string;
  fixture: string | null;
  status: string;
  reason: string | null;
  closed: Date | null;
}

function age(from: Date | null, now: Date): string {
  if (from === null) return '';
  const s = Math.max(0, Math.round((now.getTime() - from.getTime()) / 1000));
  return s < 120 ? `${s} s` : s < 7200 ? `${Math.round(s / 60)} min` : `${Math.round(s / 3600)} h`;
}

const runLink = (id: string) => `/runs/${encodeURIComponent(id)}`;

export function listPage(user: string, csrf: string, pending: PendingRow[], finished: FinishedRow[], now: Date): string {
  const rows = pending
    .map(
      (
        r,
      ) => `<tr class="pending"${r.newest !== null ? ` data-events="${esc(eventsLink(r.workflow_id))}" data-after="${r.newest}" data-action="${esc(r.action_id)}"` : ''}><td><a href="${runLink(r.workflow_id)}">${esc(r.workflow_id)}</a>${r.parent ? `<br><small class="parent">task of <a href="${runLink(r.parent)}">${esc(r.parent)}</a></small>` : ''}</td><td>${esc(r.fixture)}</td><td>${esc(r.path)}</td><td>${age(r.started, now)}</td>
<td class="counters">${r.counters ? `${r.counters.turns} turns, ${r.counters.tool_calls} calls, ${r.counters.writes} writes` : ''}</td><td class="resolution"></td></tr>`,
    )
    .join('\n');
  const done = finished
    .map(
      (r) =>
        `<tr class="finished"><td><a href="${runLink(r.workflow_id)}">${esc(r.workflow_id)}</a></td><td>${esc(r.fixture)}</td><td class="status">${esc(r.status)}</td><td>${esc(r.reason)}</td><td>${age(r.closed, now)} ago</td></tr>`,
    )
    .join('\n');
  return page(
    'Agent console',
    `${signedIn(user, csrf)}<h1>Agent console</h1><p>This page refreshes every 5 s.</p>
<h2>Awaiting approval (${pending.length})</h2>
${pending.length === 0 ? '<p id="no-pending">No run is waiting for an approval.</p>' : `<table id="pending"><thead><tr><th>run</th><th>fixture</th><th>pending action</th><th>age</th><th>counters</th><th>resolved</th></tr></thead><tbody>\n${rows}\n</tbody></table>`}
<h2>Recently finished</h2>
${finished.length === 0 ? '<p>None yet.</p>' : `<table id="finished"><thead><tr><th>run</th><th>fixture</th><th>status</th><th>reason</th><th>closed</th></tr></thead><tbody>\n${done}\n</tbody></table>`}`,
    { refreshS: 5, live: true },
  );
}

/** The diff with each line marked: additions, removals, hunk headers. */
export function diffHtml(diff: string): string {
  const lines = diff.replace(/\n$/, '').split('\n');
  return lines
    .map((l) => {
      const cls =
        l.startsWith('+++') || l.startsWith('---')
          ? 'file'
          : l.startsWith('+')
            ? 'add'
            : l.startsWith('-')
              ? 'del'
              : l.startsWith('@@')
                ? 'hunk'
                : 'ctx';
      return `<span class="${cls}">${esc(l) || ' '}</span>`;
    })
    .join('');
}

export type Notice = 'approved' | 'rejected' | 'stale' | 'unanswered';

const NOTICES: Record<Notice, [string, string]> = {
  approved: ['ok', 'Approved: the run goes on.'],
  rejected: ['ok', 'Rejected: the run observes approval_rejected with your reason.'],
  stale: [
    '',
    'Not applied: the action you saw is no longer the pending one, or its digests no longer match, so the run ignored that approval. This is the current card.',
  ],
  unanswered: ['', 'Sent, but the run did not confirm it within a few seconds (is a worker running?). This is the card as it is now.'],
};

export interface CardData {
  workflow_id: string;
  view: RunView;
  trace: TraceEvent[];
  web_ui: string | null;
  csrf: string;
  user: string;
  /** This rendering's own token, sent with the decision as its message id. */
  form_token: string;
  /** The address of the pending action's whole diff (plain text), when an action is pending. */
  diff_link?: string | null;
  /** True once this session was sent that whole diff (absent: not opened). */
  diff_opened?: boolean;
}

function describe(e: TraceEvent): string {
  const d = e.data as Record<string, unknown> | null;
  const bits: string[] = [];
  for (const k of ['name', 'path', 'decision', 'principal', 'reason', 'error', 'status', 'text']) {
    const v = d?.[k];
    if (v !== undefined && v !== null && typeof v !== 'object') bits.push(`${k}=${String(v).slice(0, 120)}`);
  }
  return `${e.seq} ${e.type}${e.call_id ? ` ${e.call_id}` : ''}${e.action_id ? ` ${e.action_id.slice(0, 12)}` : ''}${bits.length ? ` ${bits.join(' ')}` : ''}`;
}

/**
 * Approve of a write whose diff was cut waits until this session has opened the whole diff (the
 * server refuses it too; the disabled button only says so early). Reject never waits.
 */
function wholeDiffHtml(p: PendingActionView, link: string, opened: boolean): { note: string; locked: boolean } {
  if (!p.diff_truncated) return { note: '', locked: false };
  const open = `<a id="whole-diff" href="${esc(link)}">the whole diff</a>`;
  if (opened)
    return {
      note: `<p class="notice ok" id="diff-cut">The diff above is cut for display; you opened ${open}, so Approve is unlocked.</p>`,
      locked: false,
    };
  return {
    note: `<p class="notice" id="diff-cut">The diff above is cut for display. Open ${open} (plain text) before approving: Approve unlocks once this session has opened it (then reload this card). Reject works at once.</p>`,
    locked: true,
  };
}

function pendingHtml(id: string, p: PendingActionView, c: CardData): string {
  const { csrf, user, form_token: formToken } = c;
  const action = `/runs/${encodeURIComponent(id)}/approval`;
  const whole = wholeDiffHtml(p, c.diff_link ?? '', c.diff_opened === true);
  return `<section id="card"><h2>Pending write: <code id="path">${esc(p.path)}</code></h2>
<dl><dt>action id</dt><dd class="digest" id="action-id">${esc(p.action_id)}</dd>
<dt>before</dt><dd class="digest" id="before">${esc(p.before)}</dd>
<dt>after</dt><dd class="digest" id="after">${esc(p.after)}</dd>
<dt>arguments digest</dt><dd class="digest" id="args-digest">${esc(p.args_digest)}</dd>
<dt>workspace digest</dt><dd class="digest" id="workspace-digest">${esc(p.workspace_digest)}</dd>
<dt>asked because</dt><dd id="rules">${(p.rules ?? []).map((r) => `<code>${esc(r.id)}</code>: ${esc(r.why)}`).join('<br>') || 'the policy put this write at ask'}</dd></dl>
<pre class="diff" id="diff">${diffHtml(p.diff)}</pre>${whole.note}
<form method="post" action="${action}" id="decide">
<input type="hidden" name="csrf" value="${esc(csrf)}">
<input type="hidden" name="message_id" value="${esc(formToken)}">
<input type="hidden" name="action_id" value="${esc(p.action_id)}">
<input type="hidden" name="args_digest" value="${esc(p.args_digest)}">
<input type="hidden" name="workspace_digest" value="${esc(p.workspace_digest)}">
<p><label>Reason (for a rejection; optional for an approval) <input name="reason" id="reason" maxlength="2000" size="60"></label></p>
<p>Your decision is recorded as <code id="principal">console:${esc(user)}</code>, with the digests above.</p>
<p><button type="submit" name="decision" value="approve" id="approve"${whole.locked ? ' disabled' : ''}>Approve</button><button type="submit" name="decision" value="reject" id="reject">Reject</button></p>
</form><p class="notice ok" id="card-state" hidden></p></section>`;
}

export function cardPage(c: CardData, notice: Notice | null): string {
  const v = c.view;
  const plans = c.trace.filter((e) => e.type === 'plan_recorded').map((e) => String((e.data as { text?: unknown })?.text ?? ''));
  const recent = c.trace.slice(-25);
  const [cls, text] = notice ? NOTICES[notice] : ['', ''];
  const p = v.pending_approval;
  return page(
    `${c.workflow_id}: agent console`,
    `${signedIn(c.user, c.csrf)}<p><a href="/">&larr; all runs</a></p>
<h1>Run <code>${esc(c.workflow_id)}</code></h1>
${notice ? `<p class="notice ${cls}" id="notice" data-notice="${notice}">${esc(text)}</p>` : ''}
<dl><dt>status</dt><dd id="status">${esc(v.status)}${v.reason ? ` / ${esc(v.reason)}` : ''}</dd>
<dt>fixture</dt><dd>${esc(v.fixture)}</dd>${v.parent ? `<dt>task of</dt><dd id="parent"><a href="/runs/${encodeURIComponent(v.parent.workflow_id)}">${esc(v.parent.workflow_id)}</a> (${esc(v.parent.title)})</dd>` : ''}<dt>task</dt><dd id="task">${esc(v.task)}</dd>
<dt>plan</dt><dd id="plan">${plans.length ? esc(plans.at(-1)) : '(none yet)'}</dd>
<dt>counters</dt><dd id="counters">${v.counters.turns} turns, ${v.counters.tool_calls} tool calls, ${v.counters.writes} writes, ${v.counters.receipts} receipts</dd>
<dt>approver</dt><dd>${esc(v.approver)}</dd>
<dt>trace</dt><dd id="trace-id">${v.trace_id ? `<code class="digest">${esc(v.trace_id)}</code> (give this id with a report of a problem: it finds the run's spans in your tracing backend)` : 'not exported (its worker has no OTEL_EXPORTER_OTLP_ENDPOINT)'}</dd>
<dt>Web UI</dt><dd>${c.web_ui ? `<a id="web-ui" href="${esc(c.web_ui)}" rel="noreferrer">this run in the Temporal Web UI</a>` : 'address not known'}</dd></dl>
<p id="live" data-events="${esc(eventsLink(c.workflow_id))}" data-after="${recent.at(-1)?.seq ?? 0}" data-action="${esc(p?.action_id ?? '')}"><span id="live-state">not following</span> <span id="hint"></span></p>
<p class="notice" id="new-card" hidden></p>
${p ? pendingHtml(c.workflow_id, p, c) : '<p id="no-card">No write is waiting for an approval in this run.</p>'}
<pre id="reply"></pre>
<h2>Recent trace</h2><ol class="trace" id="trace">${recent.map((e) => `<li data-seq="${e.seq}" data-type="${esc(e.type)}">${esc(describe(e))}</li>`).join('')}</ol>`,
    { live: true },
  );
}
