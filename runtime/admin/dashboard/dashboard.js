// The weir dashboard. Polls the admin API of the weir that serves it once a second
// (GET /status and GET /status/metrics), keeps five minutes of totals for the rate chart,
// shows each sink's circuit and pauses / resumes it (POST /sinks/{flow}/{sink}/pause|resume),
// and browses / replays dead letters (GET /dlq, POST /dlq/replay). Nothing is fetched
// from anywhere else. The admin token (when the API asks for one) is kept in this tab's
// sessionStorage. Every value from the API reaches the page through textContent, never
// as HTML.
'use strict';

const POLL_MS = 1000;
const HISTORY = 300;           // samples kept for the chart: 5 minutes at 1/s
const DLQ_REFRESH_MS = 5000;
const TOKEN_KEY = 'weirAdminToken';

const state = {
  prev: null,                  // {t, stages: Map key -> stage} of the previous poll
  history: [],                 // [{t, in, out, err, dead}] per-second rates
  lastReason: new Map(),       // "flow|stage" -> newest dead-letter reason seen
  dlqCursor: null,             // Link rel=next of the shown list
  dlqItems: [],
  selected: new Set(),
  sinkPending: new Set(),      // "flow|sink" whose pause / resume call is on its way
  timer: null,
  dlqTimer: null,
};

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function num(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  return digits === undefined ? String(Math.round(v)) : Number(v).toFixed(digits);
}

// ---- the admin API ----------------------------------------------------------------

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers['Authorization'] = 'Bearer ' + token;
  const r = await fetch(path, Object.assign({}, options, { headers, cache: 'no-store' }));
  if (r.status === 401) throw new Unauthorized('token required');
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = { error: text }; }
  if (!r.ok) throw new Error((body && body.error) || ('HTTP ' + r.status));
  return { body, headers: r.headers };
}

function showLogin(message) {
  stopPolling();
  $('main').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message || '';
  $('conn').textContent = 'token required';
  $('token').focus();
}

function showMain() {
  $('login').hidden = true;
  $('main').hidden = false;
}

// ---- polling ----------------------------------------------------------------------

function stageKey(s) { return s.flow + '|' + s.stage; }

function rate(cur, prev, field, dt) {
  if (!prev || dt <= 0) return null;
  const d = (cur[field] || 0) - (prev[field] || 0);
  return d < 0 ? null : d / dt;
}

async function poll() {
  try {
    const [status, metrics] = await Promise.all([api('/status'), api('/status/metrics')]);
    showMain();
    render(status.body, metrics.body);
    $('conn').textContent = status.body.connected ? 'connected' : 'NATS disconnected';
    $('conn').className = 'badge ' + (status.body.connected ? 'ok' : 'bad');
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  } catch (e) {
    if (e instanceof Unauthorized) {
      showLogin(sessionStorage.getItem(TOKEN_KEY) ? 'the token was refused' : '');
      return;
    }
    $('conn').textContent = 'unreachable: ' + e.message;
    $('conn').className = 'badge bad';
  }
}

function startPolling() {
  stopPolling();
  poll();
  loadDeadLetters(false);
  state.timer = setInterval(poll, POLL_MS);
  state.dlqTimer = setInterval(() => loadDeadLetters(false), DLQ_REFRESH_MS);
}

function stopPolling() {
  if (state.timer) clearInterval(state.timer);
  if (state.dlqTimer) clearInterval(state.dlqTimer);
  state.timer = state.dlqTimer = null;
}

// ---- rendering --------------------------------------------------------------------

function render(status, metrics) {
  const now = performance.now() / 1000;
  const stages = new Map();
  for (const s of metrics.stages || []) stages.set(stageKey(s), s);
  const prev = state.prev;
  const dt = prev ? now - prev.t : 0;
  const get = (flow, stage) => stages.get(flow + '|' + stage);
  const getPrev = (flow, stage) => prev && prev.stages.get(flow + '|' + stage);

  const members = status.members || {};
  $('instance').textContent = (status.cluster ? 'cluster ' + status.cluster + ' · ' : 'standalone · ') +
      (members.instance ? 'instance ' + members.instance + ' · ' : '') + (status.nats || '');

  const totals = { in: 0, out: 0, err: 0, dead: 0, any: false };
  const flowsBody = $('flows').tBodies[0];
  flowsBody.replaceChildren();
  // The sinks' circuits (ADR 0294), from /status "sinks": "flow|sink" -> the sink's JSON.
  const circuits = new Map();
  for (const c of status.sinks || []) circuits.set(c.flow + '|' + c.sink, c);
  const sinkRows = [];
  const flowNames = [];
  for (const f of status.flows || []) {
    flowNames.push(f.name);
    const flowStage = get(f.name, 'flow') || {};
    const ingress = get(f.name, 'ingress');
    // In: events stored for the flow (its source's acks; a chained flow: what its stage took).
    const inStage = ingress ? 'ingress' : 'flow';
    const inField = ingress ? 'acked' : 'received';
    const inRate = rate(get(f.name, inStage) || {}, getPrev(f.name, inStage), inField, dt);
    let outRate = 0, errRate = 0, deadRate = 0, inFlight = 0, delivered = 0, rated = inRate !== null;
    const sinkNames = (f.sinks || []);
    for (const s of metrics.stages || []) {
      if (s.flow !== f.name) continue;
      const p = getPrev(s.flow, s.stage);
      errRate += rate(s, p, 'errors', dt) || 0;
      deadRate += rate(s, p, 'dead', dt) || 0;
      inFlight += s.in_flight || 0;
      if (s.stage.startsWith('sink:')) {
        outRate += rate(s, p, 'acked', dt) || 0;
        delivered += s.acked || 0;
      }
    }
    if (rated) {
      totals.in += inRate; totals.out += outRate; totals.err += errRate; totals.dead += deadRate; totals.any = true;
    }
    const stored = ingress ? ingress.acked : flowStage.received;
    const row = el('tr');
    row.dataset.flow = f.name;
    const cells = [
      ['name', f.name], ['active', f.active_version], ['latest', f.latest_version],
      ['deployed', deployedText(f)], ['source', f.source],
      ['in', num(inRate, 1), 'num'], ['out', num(rated ? outRate : null, 1), 'num'],
      ['errors', num(rated ? errRate : null, 1), 'num'], ['dead', num(rated ? deadRate : null, 1), 'num'],
      ['lag', num(flowStage.lag), 'num'], ['in_flight', num(inFlight), 'num'],
      ['p50', num(flowStage.latency_ms && flowStage.latency_ms.p50, 2), 'num'],
      ['p99', num(flowStage.latency_ms && flowStage.latency_ms.p99, 2), 'num'],
    ];
    for (const [k, v, cls] of cells) {
      const td = el('td', v, cls);
      td.dataset.k = k;
      row.append(td);
    }
    const st = el('td', f.running ? (f.running_version === 0 ? 'switching' : 'running') : 'stopped',
                  f.running ? 'ok' : 'bad');
    st.dataset.k = 'state';
    row.append(st);
    // Totals for scripts and tests: what /metrics says, as of this poll.
    row.dataset.stored = String(stored || 0);
    row.dataset.delivered = String(delivered);
    flowsBody.append(row);

    for (const name of sinkNames) {
      const s = get(f.name, 'sink:' + name);
      const circuit = circuits.get(f.name + '|' + name);
      if (!s && !circuit) continue;   // a `flow: {}` sink has no stage
      const p = getPrev(f.name, 'sink:' + name);
      const m = s || {};
      const out = s ? rate(s, p, 'acked', dt) : null, errs = s ? rate(s, p, 'errors', dt) : null;
      const dead = s ? rate(s, p, 'dead', dt) : null;
      const health = sinkHealth(circuit, out, errs);
      const cls = HEALTH_CLASS[health] || 'warn';
      const lat = m.latency_ms || {};
      sinkRows.push({
        flow: f.name, sink: name, circuit, delivered: m.acked || 0,
        cells: [
          ['out', num(out, 1), 'num'], ['errors', num(errs, 1), 'num'], ['dead', num(dead, 1), 'num'],
          ['lag', num(m.lag), 'num'], ['in_flight', num(m.in_flight), 'num'], ['p50', num(lat.p50, 2), 'num'],
          ['p90', num(lat.p90, 2), 'num'], ['p99', num(lat.p99, 2), 'num'], ['health', health, cls],
        ],
        reason: state.lastReason.get(f.name + '|sink:' + name) || '',
      });
    }
  }
  renderSinks(sinkRows);
  updateFlowFilter(flowNames);
  renderCluster(status);
  state.prev = { t: now, stages };
  if (totals.any) {
    state.history.push({ in: totals.in, out: totals.out, err: totals.err, dead: totals.dead });
    if (state.history.length > HISTORY) state.history.shift();
    drawChart();
  }
}

// ---- sinks -----------------------------------------------------------------------

// The sink's health word is weir's (/status "sinks" health: the circuit and the share of
// failed results in the last seconds, docs/adr/0313-sink-health-from-recent-results.md);
// without a circuit (an older weir), the page's own rates between two polls say it.
const HEALTH_CLASS = { healthy: 'ok', degraded: 'warn', paused: 'warn', failing: 'bad', down: 'bad' };
function sinkHealth(circuit, out, errs) {
  if (circuit && circuit.health) return circuit.health;
  if (errs > 0 && !(out > 0)) return 'failing';
  return errs > 0 ? 'degraded' : 'healthy';
}

// The circuit, what it means and its button come first: they stay in sight on a narrow window.
const SINK_KEYS = ['flow', 'sink', 'circuit', 'circuit_detail', 'action', 'out', 'errors', 'dead', 'lag',
                   'in_flight', 'p50', 'p90', 'p99', 'health', 'transitions', 'last_error'];

// The sink rows are updated in place while the list of sinks stays the same, so a Pause /
// Resume button is not replaced under the pointer between the press and the release.
function renderSinks(rows) {
  const body = $('sinks').tBodies[0];
  const keys = rows.map((r) => r.flow + '|' + r.sink);
  const have = Array.from(body.rows).map((tr) => tr.dataset.flow + '|' + tr.dataset.sink);
  if (keys.join('\n') !== have.join('\n')) {
    body.replaceChildren();
    for (const r of rows) body.append(sinkRow(r.flow, r.sink));
  }
  rows.forEach((r, i) => {
    const tr = body.rows[i];
    tr.dataset.delivered = String(r.delivered);
    for (const [k, v, c] of r.cells) setCell(tr, k, v, c);
    setCircuit(tr, r.circuit, r.reason);
  });
}

function sinkRow(flow, sink) {
  const tr = el('tr');
  tr.dataset.flow = flow;
  tr.dataset.sink = sink;
  for (const k of SINK_KEYS) {
    const td = el('td');
    td.dataset.k = k;
    tr.append(td);
  }
  setCell(tr, 'flow', flow);
  setCell(tr, 'sink', sink);
  const button = el('button', 'Pause');
  button.addEventListener('click', () => controlSink(flow, sink, button.dataset.action));
  tr.querySelector('td[data-k="action"]').append(button);
  return tr;
}

function setCell(tr, k, text, cls) {
  const td = tr.querySelector('td[data-k="' + k + '"]');
  const t = text === undefined || text === null ? '' : String(text);
  if (td.textContent !== t) td.textContent = t;
  const c = cls || '';
  if (td.className !== c) td.className = c;
}

function clock(ms) { return new Date(ms).toLocaleTimeString(); }
function secondsSince(ms) { return Math.max(0, Math.round((Date.now() - ms) / 1000)); }

// What the circuit says in words (docs/dashboard.md): open — since when the receiver is
// down and when the next probe goes, or that one is on the wire.
function circuitDetail(c) {
  if (c.state === 'open') {
    let text = 'receiver down' + (c.since ? ' since ' + clock(c.since) + ' (' + secondsSince(c.since) + ' s)' : '');
    if (c.probing) text += ', probe on the wire';
    else if (c.next_probe) {
      const inS = Math.ceil((c.next_probe - Date.now()) / 1000);
      text += inS > 0 ? ', next probe in ' + inS + ' s' : ', next probe due';
    }
    return text;
  }
  if (c.state === 'paused') {
    return 'paused by hand' + (c.since ? ' since ' + clock(c.since) + ' (' + secondsSince(c.since) + ' s)' : '') +
        ', events wait';
  }
  return c.since ? 'delivering since ' + clock(c.since) : 'delivering';
}

// A broker sink's connection (MQTT, NATS; docs/adr/0315-broker-sink-health.md): while it
// is down that is what the row says instead of the circuit's detail, with why.
function brokerDetail(c) {
  const l = c && c.connection;
  if (!l || l.connected) return '';
  return 'broker ' + l.broker + ' disconnected' +
      (l.since ? ' since ' + clock(l.since) + ' (' + secondsSince(l.since) + ' s)' : '') +
      (l.last_error ? ': ' + l.last_error : '') + '; events wait';
}

function setCircuit(tr, c, reason) {
  const button = tr.querySelector('td[data-k="action"] button');
  if (!c) {
    tr.dataset.circuit = '';
    setCell(tr, 'circuit', '–');
    setCell(tr, 'circuit_detail', '');
    setCell(tr, 'transitions', '–', 'num');
    setCell(tr, 'last_error', reason, 'reason');
    button.hidden = true;
    return;
  }
  tr.dataset.circuit = c.state;
  setCell(tr, 'circuit', c.state, 'circuit ' + (c.state === 'closed' ? 'closed' : c.state === 'paused' ? 'paused' : 'open'));
  setCell(tr, 'circuit_detail', brokerDetail(c) || circuitDetail(c), 'detail');
  setCell(tr, 'transitions', num(c.transitions), 'num');
  // The receiver's last retryable failure; else the newest dead letter's reason.
  setCell(tr, 'last_error', c.last_error || reason, 'reason');
  const action = c.state === 'paused' ? 'resume' : 'pause';
  button.hidden = false;
  button.dataset.action = action;
  const label = action === 'pause' ? 'Pause' : 'Resume';
  if (button.textContent !== label) button.textContent = label;
  button.disabled = state.sinkPending.has(tr.dataset.flow + '|' + tr.dataset.sink);
}

// Pause or resume one sink (no body: the admin's browser guard asks a content type only of
// writes with one); the answer is the sink's new circuit, shown at once.
async function controlSink(flow, sink, action) {
  const key = flow + '|' + sink;
  if (action !== 'pause' && action !== 'resume') return;
  state.sinkPending.add(key);
  const rowOf = () => Array.from($('sinks').tBodies[0].rows).find((tr) =>
      tr.dataset.flow === flow && tr.dataset.sink === sink);
  const before = rowOf();
  if (before) before.querySelector('td[data-k="action"] button').disabled = true;
  try {
    const r = await api('/sinks/' + encodeURIComponent(flow) + '/' + encodeURIComponent(sink) + '/' + action,
                        { method: 'POST' });
    state.sinkPending.delete(key);
    const tr = rowOf();
    if (tr) setCircuit(tr, r.body, tr.querySelector('td[data-k="last_error"]').textContent);
    $('sinks-action').textContent = (action === 'pause' ? 'paused ' : 'resumed ') + flow + ' / ' + sink +
        (r.body.changed ? '' : ' (no change: it already was)');
  } catch (e) {
    state.sinkPending.delete(key);
    if (e instanceof Unauthorized) { showLogin('the token was refused'); return; }
    $('sinks-action').textContent = action + ' ' + flow + ' / ' + sink + ' failed: ' + e.message;
    const tr = rowOf();
    if (tr) tr.querySelector('td[data-k="action"] button').disabled = false;
  }
}

// Who deployed the active version: the cluster registry's record; standalone, the file.
function deployedText(f) {
  if (Array.isArray(f.versions)) {
    const rec = f.versions.find((v) => v.version === f.active_version);
    const by = rec && rec.deployed_by ? rec.deployed_by : '–';
    return by + (f.promoted_by ? ' · promoted by ' + f.promoted_by : '');
  }
  return f.file ? 'file' : '–';
}

function renderCluster(status) {
  const m = status.members;
  $('cluster-section').hidden = !m;
  if (!m) return;
  $('cluster').textContent = 'members: ' + (Array.isArray(m.members) ? m.members.map((x) =>
      typeof x === 'string' ? x.replace(/^m\./, '') : (x.instance || x.name || JSON.stringify(x))).join(', ') : '–');
  const body = $('leases').tBodies[0];
  body.replaceChildren();
  for (const l of m.leases || []) {
    const r = el('tr');
    // The lease record is {"owner", "nonce"} as JSON text; the owner is the instance.
    let holder = l.holder || '–';
    try { holder = JSON.parse(l.holder).owner || holder; } catch (e) { /* a plain name */ }
    r.append(el('td', l.key), el('td', holder + (l.held_here ? ' (this instance)' : '')));
    body.append(r);
  }
}

function updateFlowFilter(names) {
  const sel = $('dlq-flow');
  const have = new Set(Array.from(sel.options).map((o) => o.value));
  for (const n of names) {
    if (!have.has(n)) sel.append(new Option(n, n));
  }
}

// A hand-written SVG line chart: four polylines over the last HISTORY samples.
function drawChart() {
  const svg = $('chart');
  const W = 600, H = 160, pad = 14;
  const h = state.history;
  let max = 1;
  for (const p of h) max = Math.max(max, p.in, p.out, p.err, p.dead);
  const ns = 'http://www.w3.org/2000/svg';
  // The x axis spans at least a minute, then grows to five: a fresh page is not a sliver.
  const span = Math.min(HISTORY, Math.max(60, h.length));
  svg.replaceChildren();
  for (const [field, cls] of [['in', 'in'], ['out', 'out'], ['err', 'err'], ['dead', 'dead']]) {
    const line = document.createElementNS(ns, 'polyline');
    line.setAttribute('class', cls);
    const pts = h.map((p, i) => {
      const x = W - (h.length - 1 - i) * (W / (span - 1));
      const y = H - pad - (p[field] / max) * (H - 2 * pad);
      return x.toFixed(1) + ',' + y.toFixed(1);
    });
    line.setAttribute('points', pts.join(' '));
    svg.append(line);
  }
  $('chart-scale').textContent = 'top of the chart: ' + max.toFixed(1) + '/s · ' + Math.round(span / 60) + ' min';
}

// ---- dead letters -----------------------------------------------------------------

async function loadDeadLetters(more) {
  const flow = $('dlq-flow').value;
  let path = '/dlq?limit=100' + (flow ? '&flow=' + encodeURIComponent(flow) : '');
  if (more && state.dlqCursor) path = state.dlqCursor;
  try {
    const r = await api(path);
    const link = r.headers.get('Link') || '';
    const m = link.match(/<([^>]+)>;\s*rel="next"/);
    state.dlqCursor = m ? m[1] : null;
    state.dlqItems = more ? state.dlqItems.concat(r.body) : r.body;
    for (const d of state.dlqItems) state.lastReason.set(d.flow + '|' + d.stage, d.reason);
    renderDeadLetters();
  } catch (e) {
    if (e instanceof Unauthorized) return;   // poll() shows the login
    $('dlq-status').textContent = 'cannot list dead letters: ' + e.message;
  }
}

function renderDeadLetters() {
  const body = $('dlq').tBodies[0];
  body.replaceChildren();
  const ids = new Set(state.dlqItems.map((d) => d.id));
  for (const id of Array.from(state.selected)) if (!ids.has(id)) state.selected.delete(id);
  for (const d of state.dlqItems) {
    const r = el('tr', undefined, 'clickable');
    r.dataset.id = d.id;
    const box = el('input');
    box.type = 'checkbox';
    box.checked = state.selected.has(d.id);
    box.addEventListener('click', (ev) => {
      ev.stopPropagation();
      if (box.checked) state.selected.add(d.id); else state.selected.delete(d.id);
      $('dlq-replay-selected').disabled = state.selected.size === 0;
    });
    const c = el('td');
    c.append(box);
    r.append(c, el('td', d.id), el('td', d.flow), el('td', d.stage), el('td', d.version, 'num'),
             el('td', d.deliveries, 'num'), el('td', new Date(d.at).toLocaleString()), el('td', d.reason, 'reason'));
    r.addEventListener('click', () => openDeadLetter(d));
    body.append(r);
  }
  $('dlq-more').hidden = !state.dlqCursor;
  $('dlq-replay-selected').disabled = state.selected.size === 0;
  $('dlq-status').textContent = state.dlqItems.length + ' shown' + (state.dlqCursor ? ', more stored' : '');
}

function openDeadLetter(d) {
  $('dlq-detail').hidden = false;
  $('detail-id').textContent = d.id;
  const dl = $('detail-fields');
  dl.replaceChildren();
  for (const k of ['flow', 'version', 'stage', 'reason', 'deliveries', 'at', 'seq']) {
    dl.append(el('dt', k), el('dd', k === 'at' ? new Date(d.at).toISOString() : d[k]));
  }
  $('detail-event').textContent = JSON.stringify(d.event, null, 2);
  $('detail-replay').onclick = () => replay([d.id]);
  $('dlq-detail').scrollIntoView({ block: 'end' });
}

async function replay(ids) {
  try {
    const r = await api('/dlq/replay', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ids }),
    });
    $('dlq-action').textContent = 'replayed ' + r.body.replayed;
    state.selected.clear();
    $('dlq-all').checked = false;
    $('dlq-detail').hidden = true;
    loadDeadLetters(false);
  } catch (e) {
    $('dlq-action').textContent = 'replay failed: ' + e.message;
  }
}

// ---- wiring -----------------------------------------------------------------------

$('login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('token').value);
  $('token').value = '';
  startPolling();
});
$('dlq-flow').addEventListener('change', () => { state.selected.clear(); loadDeadLetters(false); });
$('dlq-refresh').addEventListener('click', () => loadDeadLetters(false));
$('dlq-more').addEventListener('click', () => loadDeadLetters(true));
$('dlq-replay-selected').addEventListener('click', () => replay(Array.from(state.selected)));
$('dlq-all').addEventListener('change', (ev) => {
  for (const d of state.dlqItems) {
    if (ev.target.checked) state.selected.add(d.id); else state.selected.delete(d.id);
  }
  renderDeadLetters();
});
$('detail-close').addEventListener('click', () => { $('dlq-detail').hidden = true; });

startPolling();
