/**
 * The console's one script: the run page and the list follow their runs' event streams with it
 * (EventSource, which reconnects by itself with `Last-Event-ID`). It is the project's own, inlined
 * in the page and allowed by its hash in the page's policy; the policy lets it connect to the
 * console's own origin and nowhere else.
 *
 * Hazards: everything a frame carries (paths, plans, a model's text) is untrusted, so the script
 * only ever sets `textContent` and attributes it names itself, never markup. It adds a row for each
 * trace frame it gets and dedupes nothing: a frame sent twice would show twice.
 */
import { createHash } from 'node:crypto';

const SCRIPT = String.raw`(() => {
  const describe = (e) => {
    const d = e.data || {};
    const bits = [];
    for (const k of ['name', 'path', 'decision', 'principal', 'reason', 'error', 'status', 'text']) {
      const v = d[k];
      if (v !== undefined && v !== null && typeof v !== 'object') bits.push(k + '=' + String(v).slice(0, 120));
    }
    return e.seq + ' ' + e.type + (e.call_id ? ' ' + e.call_id : '') + (e.action_id ? ' ' + e.action_id.slice(0, 12) : '') + (bits.length ? ' ' + bits.join(' ') : '');
  };
  const text = (el, t) => { if (el) el.textContent = t; };
  const follow = (events, after, version, on) => {
    const es = new EventSource(events + '?v=' + version + '&after=' + encodeURIComponent(after));
    for (const [type, fn] of Object.entries(on)) es.addEventListener(type, (m) => fn(JSON.parse(m.data)));
    es.addEventListener('end', () => es.close());
    es.addEventListener('fault', () => es.close());
    return es;
  };
  const counters = (c) => c.turns + ' turns, ' + c.tool_calls + ' tool calls, ' + c.writes + ' writes, ' + c.receipts + ' receipts';

  const live = document.getElementById('live');
  if (live) {
    const trace = document.getElementById('trace');
    const state = document.getElementById('live-state');
    const shown = live.dataset.action || '';
    const row = (e) => {
      const li = document.createElement('li');
      li.dataset.seq = String(e.seq);
      li.dataset.type = e.type;
      li.textContent = describe(e);
      trace.appendChild(li);
      while (trace.children.length > 2000) trace.removeChild(trace.firstChild);
    };
    const card = (f) => {
      if (f.state === 'requested' && f.action_id !== shown) {
        const note = document.getElementById('new-card');
        note.hidden = false;
        text(note, 'A new write awaits approval: ' + (f.path || '') + '. Reload this page to decide it.');
      }
      if (f.action_id !== shown || (f.state !== 'approved' && f.state !== 'rejected')) return;
      const el = document.getElementById('card-state');
      el.hidden = false;
      el.dataset.state = f.state;
      text(el, 'Resolved: ' + f.state + (f.principal ? ' by ' + f.principal : '') + (f.reason ? ' (' + f.reason + ')' : '') + '. A decision sent from this card now is not applied.');
    };
    const reply = document.getElementById('reply');
    const es = follow(live.dataset.events, live.dataset.after, 2, {
      trace: (f) => row(f.event),
      card: (f) => { row(f.event); card(f); },
      turn_end: (f) => { row(f.event); text(reply, 'turn ' + f.turn + ': ' + f.text); },
      fragment: (f) => {
        if (reply.dataset.turn !== String(f.turn) || reply.dataset.stream !== String(f.stream)) {
          reply.dataset.turn = String(f.turn);
          reply.dataset.stream = String(f.stream);
          text(reply, 'turn ' + f.turn + ': ');
        }
        reply.textContent += f.text;
      },
      run: (f) => {
        text(document.getElementById('status'), f.run.status + (f.run.reason ? ' / ' + f.run.reason : ''));
        text(document.getElementById('counters'), counters(f.run.counters));
      },
      hint: (f) => text(document.getElementById('hint'), f.hint !== 'no_worker' ? 'waiting for ' + (f.on === 'model' ? 'the model' : f.on)
        : f.wedged ? 'wedged: its workflow task ' + (f.wedged.nondeterminism ? 'fails on nondeterminism' : 'fails') + ' on build ' + f.wedged.build + ' (attempt ' + f.wedged.attempt + '): ' + f.wedged.error
        : 'no worker answers for the run yet'),
      end: () => text(state, 'the run ended'),
      fault: (f) => text(state, 'the stream stopped: ' + f.detail),
    });
    es.onopen = () => text(state, 'live');
    es.onerror = () => text(state, es.readyState === 2 ? 'the stream is closed: reload the page' : 'reconnecting');
  }

  const rows = [...document.querySelectorAll('#pending tr[data-events]')].slice(0, 3);
  for (const tr of rows) {
    const resolution = tr.querySelector('.resolution');
    follow(tr.dataset.events, tr.dataset.after, 1, {
      card: (f) => {
        if (f.action_id !== tr.dataset.action || (f.state !== 'approved' && f.state !== 'rejected')) return;
        tr.dataset.state = f.state;
        text(resolution, f.state + (f.principal ? ' by ' + f.principal : ''));
      },
      run: (f) => text(tr.querySelector('.counters'), f.run.counters.turns + ' turns, ' + f.run.counters.tool_calls + ' calls, ' + f.run.counters.writes + ' writes'),
      end: (f) => { tr.dataset.state = 'ended'; text(resolution, 'ended ' + f.status); },
    });
  }
})();`;

/** The script, as pages inline it. */
export const LIVE_SCRIPT = SCRIPT;

/** The policy of a page that runs the script: the script by its hash, connections to this origin only; nothing else changes. */
export const LIVE_POLICY =
  `default-src 'none'; script-src 'sha256-${createHash('sha256').update(SCRIPT).digest('base64')}'; connect-src 'self'; ` +
  "style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
