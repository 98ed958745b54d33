// dashboard.js — the usage dashboard (GET /dashboard): this server's usage
// from /api/usage (a key's own, every key's for an admin key), its busy time
// and cost from /api/utilization, and a live panel from /metrics, drawn with
// Chart.js (window.Chart, Debian's build) with a table of the exact figures
// under every chart, each table downloadable as CSV. The API key is the chat
// page's (localStorage "ember.key"); the page asks for one when the server
// answers 401. The price per hour and the latency targets stay in this
// browser ("ember.dashboard"). Requests go to this server only.
const $ = (id) => document.getElementById(id);
const KEY = 'ember.key', SETTINGS = 'ember.dashboard';
const DEFAULTS = { price: 2, ttft: 1000, tpot: 100, queue: 250 };
const POLL_MS = 3000, HOUR = 3600e3, DAY = 86400e3;

const settings = Object.assign({}, DEFAULTS, (() => {
  try { return JSON.parse(localStorage.getItem(SETTINGS) || '{}'); } catch (e) { return {}; }
})());
const charts = {};
let last = null;          // the figures of the last load, for redrawing
let lastLive = null;      // { t, busy } of the last /metrics read
let pollTimer = null, loads = 0, polls = 0, keyNeeded = false;

class NeedKey extends Error {}

// ---- talking to the server -------------------------------------------------------

async function api(path) {
  const headers = {};
  const k = localStorage.getItem(KEY);
  if (k) headers.Authorization = 'Bearer ' + k;
  const r = await fetch(path, { headers, cache: 'no-store' });
  if (r.status === 401) {
    let m = 'this server needs an API key';
    try { m = (await r.json()).error.message; } catch (e) { /* not JSON */ }
    throw new NeedKey(m);
  }
  if (!r.ok) {
    let m = 'HTTP ' + r.status;
    try { m = (await r.json()).error.message; } catch (e) { /* not JSON */ }
    throw new Error(path.split('?')[0] + ': ' + m);
  }
  return path.startsWith('/metrics') ? r.text() : r.json();
}

function askKey(message) {
  keyNeeded = true;
  clearTimeout(pollTimer);
  $('keymsg').textContent = message + '. Give an API key (ember keys add NAME; --admin to see every key).';
  $('keyform').hidden = false;
  $('keyinput').focus();
}

// ---- numbers --------------------------------------------------------------------------

const nf = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const none = (v) => v === null || v === undefined || Number.isNaN(v);
const fmt = {
  int: (v) => none(v) ? '–' : nf.format(v),
  ms: (v) => none(v) ? '–' : (v >= 100 ? nf.format(v) : v.toFixed(1)) + ' ms',
  pct: (v) => none(v) ? '–' : (v > 0 && v < 0.1 ? (v * 100).toFixed(2) : (v * 100).toFixed(1)) + '%',
  money: (v) => none(v) ? '–' : '$' + (v >= 100 ? nf.format(v) : v >= 1 ? v.toFixed(2) : v.toPrecision(3)),
  dur: (s) => none(s) ? '–' : s < 60 ? s.toFixed(s < 10 ? 2 : 1) + ' s'
    : s < 3600 ? (s / 60).toFixed(1) + ' min' : (s / 3600).toFixed(2) + ' h',
  rate: (v) => none(v) ? '–' : v >= 100 ? nf.format(v) : v.toFixed(1),
};
const msText = (v) => none(v) ? 'n/a' : fmt.ms(v);

// ---- tables and CSV -----------------------------------------------------------------------

function csvField(s) {
  return /[",\r\n]/.test(s) || /^\s|\s$/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
}

// The table as CSV: a heading's field name (as the API names it) and the
// exact value behind each cell (milliseconds, seconds, shares as 0..1).
function tableCsv(t) {
  return [...t.rows].map((tr) => [...tr.cells].map((c) => csvField(c.dataset.v ?? c.textContent)).join(','))
    .join('\r\n') + '\r\n';
}

function download(name, text) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([text], { type: 'text/csv;charset=utf-8' }));
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

// cols: [{ label, key | get(row) with csv (its field name), fmt, num, cls(row) }];
// the first column heads each row.
function table(el, { caption, cols, rows, total, file, empty }) {
  el.replaceChildren();
  if (!rows.length) {
    const p = document.createElement('p');
    p.className = 'empty';
    p.textContent = empty || 'No requests in this range.';
    el.append(p);
    return;
  }
  const t = document.createElement('table');
  t.createCaption().textContent = caption;   // for screen readers; shown above the scrolling part
  const cap = document.createElement('p');
  cap.className = 'tcap';
  cap.setAttribute('aria-hidden', 'true');
  cap.textContent = caption;
  const head = t.createTHead().insertRow();
  for (const c of cols) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.textContent = c.label;
    th.dataset.v = c.csv || c.key;
    if (c.num) th.className = 'num';
    head.append(th);
  }
  const add = (section, r) => {
    const tr = section.insertRow();
    cols.forEach((c, i) => {
      const v = c.get ? c.get(r) : r[c.key];
      const cell = document.createElement(i === 0 ? 'th' : 'td');
      if (i === 0) cell.scope = 'row';
      cell.textContent = c.fmt ? c.fmt(v, r) : none(v) ? '–' : String(v);
      cell.dataset.v = none(v) ? '' : String(v);
      if (c.num) cell.classList.add('num');
      if (c.cls) cell.classList.add(c.cls(r));
      tr.append(cell);
    });
  };
  const body = t.createTBody();
  rows.forEach((r) => add(body, r));
  if (total) add(t.createTFoot(), total);
  const scroll = document.createElement('div');
  scroll.className = 'scroll';
  scroll.tabIndex = 0;
  scroll.setAttribute('role', 'region');
  scroll.setAttribute('aria-label', caption);
  scroll.append(t);
  const bar = document.createElement('div');
  bar.className = 'tablebar';
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'csv';
  b.textContent = 'Download CSV';
  b.setAttribute('aria-label', 'Download the table "' + caption + '" as CSV');
  b.addEventListener('click', () => download(file, tableCsv(t)));
  bar.append(b);
  el.append(cap, scroll, bar);
}

// ---- charts ----------------------------------------------------------------------------------

const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

function chart(id, type, labels, datasets, scales, extra) {
  if (charts[id]) charts[id].destroy();
  const Chart = window.Chart;
  Chart.defaults.color = css('--muted');
  Chart.defaults.borderColor = css('--grid');
  Chart.defaults.font.family = 'system-ui, sans-serif';
  charts[id] = new Chart($(id), {
    type,
    data: { labels, datasets },
    options: Object.assign({
      responsive: true, maintainAspectRatio: false, animation: false,
      interaction: { mode: 'index', intersect: false },
      plugins: { legend: { labels: { boxWidth: 12 } } },
      scales,
    }, extra || {}),
  });
}

const axis = (title, extra) => Object.assign({ beginAtZero: true, title: { display: true, text: title } }, extra || {});
const right = (title) => axis(title, { position: 'right', grid: { drawOnChartArea: false } });
const xAxis = { offset: true, ticks: { maxRotation: 0, autoSkip: true, autoSkipPadding: 12 } };

// Every period of the range up to now, for time axes (tables list only those with data).
function periods(sinceMs, untilMs, bucket) {
  const step = bucket === 'hour' ? HOUR : DAY, out = [];
  const end = Math.min(untilMs, Math.ceil((Date.now() + 1) / step) * step);
  for (let t = sinceMs; t < end && out.length < 5000; t += step) out.push(periodLabel(t, bucket));
  return out;
}
const periodLabel = (t, bucket) => {
  const iso = new Date(t).toISOString();
  return bucket === 'hour' ? iso.slice(0, 13) + ':00Z' : iso.slice(0, 10);
};
const shortLabel = (l) => l.length > 10 ? l.slice(5, 10) + ' ' + l.slice(11, 16) : l.slice(5);
const periodText = (l) => l === 'total' ? l : l.replace('T', ' ').replace(':00Z', ':00');
const keyLabel = (g) => g === '-' ? '(no key)' : g;

// ---- the diagnosis ---------------------------------------------------------------------------

// Which of the three cases a row's latencies show (docs/api.md, GET /dashboard).
function diagnose(r, t) {
  if (!r || !r.requests) return { c: 'none', word: '–', text: 'No requests in this range.' };
  const q = r.queue_p99_ms, f = r.ttft_p99_ms, s = r.tpot_p99_ms;
  const behind = `first token ${msText(f)}, ${msText(s)} per token (median ${msText(r.tpot_p50_ms)}), ` +
    `queue ${msText(q)}; p99s over ${fmt.int(r.requests)} requests`;
  if (!none(q) && q > t.queue) {
    return { c: 'capacity', word: 'capacity', text: `Too little capacity overall: requests waited ${msText(q)} ` +
      `to be admitted (queue time p99, target ${fmt.ms(t.queue)}), while streaming ran at ${msText(s)} per token ` +
      `(target ${fmt.ms(t.tpot)}). The box has more work than it can start: add a box, or spread the load. ` +
      `(${behind}.)` };
  }
  if (!none(s) && s > t.tpot) {
    return { c: 'decode', word: 'decode', text: `Decode is overloaded: tokens stream at ${msText(s)} each (time per ` +
      `output token p99, median ${msText(r.tpot_p50_ms)}; target ${fmt.ms(t.tpot)}), while requests wait only ` +
      `${msText(q)} (queue p99) and the first token comes in ${msText(f)} (p99). Run fewer sequences in ` +
      `parallel (--parallel), or add a box.` };
  }
  if (!none(f) && f > t.ttft) {
    const share = none(r.cached_share) ? '' : `; ${fmt.pct(r.cached_share)} of prompt tokens came from the cache`;
    return { c: 'prompt', word: 'prompt', text: `The prompt side is the bottleneck: the first token takes ` +
      `${msText(f)} (time to first token p99, target ${fmt.ms(t.ttft)}) although requests wait only ${msText(q)} ` +
      `to be admitted and tokens stream briskly at ${msText(s)} each (p99). Shorten contexts, or share prompt ` +
      `prefixes so that the prefix cache serves them${share}.` };
  }
  return { c: 'ok', word: 'ok', text: `Within targets: ${behind} (targets ${fmt.ms(t.ttft)}, ${fmt.ms(t.tpot)}, ` +
    `${fmt.ms(t.queue)}).` };
}

const targets = () => ({ ttft: settings.ttft, tpot: settings.tpot, queue: settings.queue });

// ---- the sections ---------------------------------------------------------------------------

// The numeric columns of the usage tables, by the API's field names.
const C = Object.fromEntries([
  ['requests', 'requests', fmt.int], ['prompt tokens', 'prompt_tokens', fmt.int],
  ['cached tokens', 'cached_tokens', fmt.int], ['cached share', 'cached_share', fmt.pct],
  ['completion tokens', 'completion_tokens', fmt.int],
  ['TTFT p50', 'ttft_p50_ms', fmt.ms], ['TTFT p99', 'ttft_p99_ms', fmt.ms],
  ['TPOT p50', 'tpot_p50_ms', fmt.ms], ['TPOT p99', 'tpot_p99_ms', fmt.ms],
  ['queue p50', 'queue_p50_ms', fmt.ms], ['queue p99', 'queue_p99_ms', fmt.ms],
  ['served', 'up_s', fmt.dur], ['busy', 'busy_s', fmt.dur], ['utilization', 'utilization', fmt.pct],
  ['tokens generated', 'generated_tokens', fmt.int], ['tokens/s busy', 'busy_tokens_per_s', fmt.rate],
  ['$/1M full load', 'cost_per_1m_full_load', fmt.money], ['$/1M measured', 'cost_per_1m_measured', fmt.money],
].map(([label, key, f]) => [key, { label, key, fmt: f, num: true }]));
const pick = (...keys) => keys.map((k) => C[k]);
const usageCols = (first) => [first, ...pick('requests', 'prompt_tokens', 'cached_tokens', 'cached_share',
  'completion_tokens', 'ttft_p50_ms', 'tpot_p50_ms')];

function drawTime(d) {
  const labels = periods(d.sMs, d.uMs, d.bucket);
  const by = new Map(d.byTime.groups.map((g) => [g.group, g]));
  const series = (k, scale) => labels.map((l) => by.has(l) && !none(by.get(l)[k]) ? by.get(l)[k] * (scale || 1) : null);
  const zero = (k) => labels.map((l) => by.has(l) ? by.get(l)[k] : 0);
  const xs = labels.map(shortLabel);
  const per = d.bucket === 'hour' ? 'hour (UTC)' : 'day (UTC)';
  const periodCol = { label: per, key: 'group', fmt: periodText };
  const rows = d.byTime.groups, total = Object.assign({}, d.byTime.total, { group: 'total' });
  const file = (what) => `ember-${what}-${d.since}-${d.until}.csv`;

  chart('chart-volume', 'bar', xs, [
    { label: 'prompt tokens', data: zero('prompt_tokens'), backgroundColor: css('--c2'), yAxisID: 'y' },
    { label: 'completion tokens', data: zero('completion_tokens'), backgroundColor: css('--c1'), yAxisID: 'y' },
    { type: 'line', label: 'requests', data: zero('requests'), borderColor: css('--c3'), backgroundColor: css('--c3'),
      yAxisID: 'y1', pointRadius: 2 },
  ], { x: xAxis, y: axis('tokens'), y1: right('requests') });
  table($('table-volume'), {
    caption: `Requests and tokens per ${per}`, file: file('tokens'), rows, total,
    cols: [periodCol, ...pick('requests', 'prompt_tokens', 'cached_tokens', 'completion_tokens')],
  });

  const line = (label, k, color, dash, y) => ({ label, data: series(k), borderColor: color, backgroundColor: color,
    borderDash: dash ? [5, 4] : [], yAxisID: y, spanGaps: true, pointRadius: 3 });
  chart('chart-latency', 'line', xs, [
    line('TTFT p50', 'ttft_p50_ms', css('--c1'), true, 'y'), line('TTFT p99', 'ttft_p99_ms', css('--c1'), false, 'y'),
    line('TPOT p50', 'tpot_p50_ms', css('--c2'), true, 'y1'), line('TPOT p99', 'tpot_p99_ms', css('--c2'), false, 'y1'),
  ], { x: xAxis, y: axis('time to first token, ms'), y1: right('time per output token, ms') });
  const t = targets();
  table($('table-latency'), {
    caption: `Latency per ${per} (ms) and what it shows`, file: file('latency'), rows, total,
    cols: [periodCol, ...pick('requests', 'ttft_p50_ms', 'ttft_p99_ms', 'tpot_p50_ms', 'tpot_p99_ms',
      'queue_p50_ms', 'queue_p99_ms'),
      { label: 'diagnosis', csv: 'diagnosis', get: (r) => diagnose(r, t).word, cls: (r) => 'case-' + diagnose(r, t).c }],
  });
  const dg = diagnose(d.byTime.total, t);
  $('diag-line').textContent = dg.text;
  $('diag-line').dataset.case = dg.c;

  chart('chart-cached', 'line', xs, [
    { label: 'cached share of prompt tokens, %', data: series('cached_share', 100), borderColor: css('--c2'),
      backgroundColor: css('--c2'), spanGaps: true, pointRadius: 2 },
  ], { x: xAxis, y: axis('%', { max: 100 }) }, { plugins: { legend: { display: false } } });
  table($('table-cached'), {
    caption: `Prompt tokens served from the prefix cache per ${per}`, file: file('cached'), rows, total,
    cols: [periodCol, ...pick('prompt_tokens', 'cached_tokens', 'cached_share')],
  });
}

function drawGroups(id, tableId, rep, what, first, file) {
  const rows = rep.groups;
  $(id).parentElement.style.height = Math.max(12 * 16, rows.length * 30 + 80) + 'px';   // a bar pair per group
  chart(id, 'bar', rows.map((g) => what === 'key' ? keyLabel(g.group) : g.group), [
    { label: 'prompt tokens', data: rows.map((g) => g.prompt_tokens), backgroundColor: css('--c2') },
    { label: 'completion tokens', data: rows.map((g) => g.completion_tokens), backgroundColor: css('--c1') },
  ], { x: axis('tokens'), y: {} }, { indexAxis: 'y' });
  table($(tableId), {
    caption: `Usage per ${what}`, file, rows, total: Object.assign({}, rep.total, { group: 'total' }),
    cols: usageCols(first),
  });
}

function drawUtil(d) {
  const u = d.util, tot = u.total;
  const full = $('cost-full'), meas = $('cost-measured');
  const set = (el, v, why) => {
    el.querySelector('.big').textContent = fmt.money(v);
    el.querySelector('.big').dataset.v = none(v) ? '' : String(v);
    el.querySelector('.why').textContent = why;
  };
  if (!tot.generated_tokens) {
    const why = tot.up_s ? `No tokens were generated in this range (ember served ${fmt.dur(tot.up_s)}).`
      : 'ember recorded no serving time in this range.';
    set(full, null, why);
    set(meas, null, why);
  } else {
    set(full, tot.cost_per_1m_full_load, `If the box were busy every hour at the ${fmt.rate(tot.busy_tokens_per_s)} ` +
      `tokens/s it generated while busy (${fmt.int(tot.generated_tokens)} tokens in ${fmt.dur(tot.busy_s)} of ` +
      `busy time), at ${fmt.money(u.gpu_cost_per_hour)} an hour.`);
    set(meas, tot.cost_per_1m_measured, `What the tokens cost with the idle time paid too: busy ` +
      `${fmt.pct(tot.utilization)} of the ${fmt.dur(tot.up_s)} ember served in this range, so ` +
      `${(1 / tot.utilization).toFixed(1)} times the full-load price.`);
  }
  const labels = periods(d.sMs, d.uMs, d.bucket);
  const by = new Map(u.buckets.map((b) => [b.period, b]));
  chart('chart-util', 'bar', labels.map(shortLabel), [
    { label: 'utilization, %', data: labels.map((l) => by.has(l) && !none(by.get(l).utilization)
      ? by.get(l).utilization * 100 : null), backgroundColor: css('--c4') },
  ], { x: xAxis, y: axis('% of the time served', { max: 100 }) }, { plugins: { legend: { display: false } } });
  table($('table-util'), {
    caption: `Utilization and cost per ${d.bucket === 'hour' ? 'hour' : 'day'} (UTC)`,
    file: `ember-utilization-${d.since}-${d.until}.csv`, rows: u.buckets, total: tot,
    empty: 'ember recorded no serving time in this range.',
    cols: [{ label: d.bucket === 'hour' ? 'hour (UTC)' : 'day (UTC)', key: 'period', fmt: periodText },
      ...pick('up_s', 'busy_s', 'utilization', 'generated_tokens', 'busy_tokens_per_s', 'cost_per_1m_full_load',
        'cost_per_1m_measured')],
  });
}

function drawScope(d) {
  const k = d.byKey, picked = $('key').value;
  let text;
  if (picked !== '') text = `Usage of key ${keyLabel(picked === '0' ? '-' : picked)} (an admin key can choose).`;
  else if (k.key_id !== undefined) text = 'Your key\'s usage only' + (k.key_id ? ` (key ${k.key_id}).` : ' (requests without a key).');
  else text = 'Every key\'s usage.';
  $('scope').textContent = text + ` ${d.since} to ${d.until}, UTC.`;
  // an admin (every key's usage) may pick one key
  if (picked === '' && k.key_id === undefined) {
    const sel = $('key'), have = new Set([...sel.options].map((o) => o.value));
    for (const g of k.groups) {
      const v = g.group === '-' ? '0' : g.group;
      if (!have.has(v)) sel.append(new Option(keyLabel(g.group), v));
    }
    $('keypick').hidden = sel.options.length < 2;
  }
}

function drawAll(d) {
  drawScope(d);
  drawTime(d);
  drawUtil(d);
  drawGroups('chart-key', 'table-key', d.byKey, 'key', { label: 'key', key: 'group', fmt: keyLabel },
    `ember-keys-${d.since}-${d.until}.csv`);
  drawGroups('chart-class', 'table-class', d.byClass, 'class', { label: 'class', key: 'group' },
    `ember-classes-${d.since}-${d.until}.csv`);
}

// ---- loading ------------------------------------------------------------------------------------

const today = () => new Date().toISOString().slice(0, 10);
const daysBefore = (n) => new Date(Date.now() - n * DAY).toISOString().slice(0, 10);

function utilPath(d) {
  const q = new URLSearchParams({ bucket: d.bucket, since: d.since, until: d.until });
  if (settings.price >= 0 && settings.price !== '') q.set('gpu_cost_per_hour', String(settings.price));
  return '/api/utilization?' + q;
}

async function load() {
  $('error').textContent = '';
  const since = $('since').value, until = $('until').value;
  if (!since || !until || since > until) {
    $('error').textContent = 'The range needs a first day on or before its last day.';
    return;
  }
  const sMs = Date.parse(since + 'T00:00:00Z'), uMs = Date.parse(until + 'T00:00:00Z') + DAY;
  const p = $('period').value, bucket = p === 'auto' ? (uMs - sMs <= 2 * DAY ? 'hour' : 'day') : p;
  const q = new URLSearchParams({ since, until });
  if ($('key').value !== '') q.set('key', $('key').value);
  const u = new URLSearchParams({ since, until, period: p });
  if ($('key').value !== '') u.set('key', $('key').value);
  history.replaceState(null, '', '/dashboard?' + u);
  const d = { since, until, sMs, uMs, bucket };
  try {
    [d.byTime, d.byKey, d.byClass, d.util] = await Promise.all([
      api(`/api/usage?group_by=${bucket}&${q}`), api(`/api/usage?group_by=key&${q}`),
      api(`/api/usage?group_by=class&${q}`), api(utilPath(d))]);
  } catch (e) {
    if (e instanceof NeedKey) askKey(e.message);
    else $('error').textContent = e.message;
    return;
  }
  last = d;
  drawAll(d);
  document.body.dataset.loaded = String(++loads);   // a load finished (the tests wait on it)
}

async function reloadUtil() {
  if (!last) return;
  try {
    last.util = await api(utilPath(last));
    drawUtil(last);
    document.body.dataset.loaded = String(++loads);
  } catch (e) {
    $('error').textContent = e.message;
  }
}

// ---- the live panel --------------------------------------------------------------------------------

function parseMetrics(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}

function drawLive(m) {
  const put = (id, v, f) => { $(id).textContent = (f || fmt.int)(v); $(id).dataset.v = none(v) ? '' : String(v); };
  const g = (name) => m.has(name) ? m.get(name) : null;
  put('live-tps', g('ember_generation_tokens_per_second'), fmt.rate);
  put('live-run-i', g('ember_requests_running{class="interactive"}'));
  put('live-run-b', g('ember_requests_running{class="background"}'));
  put('live-queue-i', g('ember_requests_queued{class="interactive"}'));
  put('live-queue-b', g('ember_requests_queued{class="background"}'));
  const used = g('ember_kv_blocks{state="used"}'), cached = g('ember_kv_blocks{state="cached"}');
  const total = g('ember_kv_capacity_blocks');
  put('live-kv-used', used);
  put('live-kv-cached', cached);
  put('live-kv-free', g('ember_kv_blocks{state="free"}'));
  put('live-kv-total', total);
  $('kvbar-used').style.width = total ? (100 * used / total) + '%' : '0';
  $('kvbar-cached').style.width = total ? (100 * cached / total) + '%' : '0';
  const now = performance.now(), busy = g('ember_busy_seconds_total');
  if (lastLive && !none(busy) && now > lastLive.t) {
    put('live-busy', Math.min(1, Math.max(0, (busy - lastLive.busy) / ((now - lastLive.t) / 1e3))), fmt.pct);
  }
  lastLive = { t: now, busy };
  drawBatches(m);
  $('live-when').textContent = 'updated ' + new Date().toISOString().slice(11, 19) + ' UTC, every ' + POLL_MS / 1e3 + ' s';
  document.body.dataset.polls = String(++polls);
}

// Each unfinished batch's progress, from ember_batch_requests{batch,state}.
function drawBatches(m) {
  const jobs = new Map();
  for (const [k, v] of m) {
    const x = /^ember_batch_requests\{batch="([^"]+)",state="(total|completed|failed)"\}$/.exec(k);
    if (!x) continue;
    if (!jobs.has(x[1])) jobs.set(x[1], { total: 0, completed: 0, failed: 0 });
    jobs.get(x[1])[x[2]] = v;
  }
  const ul = $('live-batches');
  ul.replaceChildren();
  if (!jobs.size) {
    const li = document.createElement('li');
    li.className = 'muted';
    li.textContent = 'none';
    ul.append(li);
    return;
  }
  for (const [id, j] of jobs) {
    const done = j.completed + j.failed;
    const li = document.createElement('li');
    li.dataset.batch = id;
    li.dataset.done = String(done);
    li.dataset.total = String(j.total);
    const name = document.createElement('code');
    name.textContent = id;
    const bar = document.createElement('span');
    bar.className = 'bbar';
    bar.setAttribute('aria-hidden', 'true');
    const fill = document.createElement('span');
    fill.style.width = j.total ? (100 * done / j.total) + '%' : '0';
    bar.append(fill);
    const what = document.createElement('span');
    what.className = 'small';
    what.textContent = fmt.int(done) + ' of ' + fmt.int(j.total) + ' done' + (j.failed ? ', ' + fmt.int(j.failed) + ' failed' : '');
    li.append(name, bar, what);
    ul.append(li);
  }
}

async function poll() {
  clearTimeout(pollTimer);
  if (keyNeeded) return;
  try {
    drawLive(parseMetrics(await api('/metrics')));
  } catch (e) {
    if (e instanceof NeedKey) return askKey(e.message);
    $('live-when').textContent = 'not updated: ' + e.message;
  }
  pollTimer = setTimeout(poll, POLL_MS);
}

// ---- controls ----------------------------------------------------------------------------------------

function saveSettings() {
  localStorage.setItem(SETTINGS, JSON.stringify(settings));
}

function init() {
  const u = new URLSearchParams(location.search);
  $('since').value = u.get('since') || daysBefore(6);
  $('until').value = u.get('until') || today();
  if (u.get('period')) $('period').value = u.get('period');
  if (u.get('key')) $('key').append(new Option(keyLabel(u.get('key') === '0' ? '-' : u.get('key')), u.get('key'), true, true));
  $('price').value = settings.price;
  $('t-ttft').value = settings.ttft;
  $('t-tpot').value = settings.tpot;
  $('t-queue').value = settings.queue;
  $('forget').hidden = !localStorage.getItem(KEY);

  $('controls').addEventListener('submit', (e) => { e.preventDefault(); load(); });
  $('period').addEventListener('change', load);
  $('key').addEventListener('change', load);
  for (const b of document.querySelectorAll('.presets button')) {
    b.addEventListener('click', () => {
      $('since').value = daysBefore(Number(b.dataset.days) - 1);
      $('until').value = today();
      load();
    });
  }
  $('price').addEventListener('change', () => {
    const v = Number($('price').value);
    if ($('price').value === '' || !(v >= 0)) return;
    settings.price = v;
    saveSettings();
    reloadUtil();
  });
  for (const [id, k] of [['t-ttft', 'ttft'], ['t-tpot', 'tpot'], ['t-queue', 'queue']]) {
    $(id).addEventListener('change', () => {
      const v = Number($(id).value);
      if ($(id).value === '' || !(v >= 0)) return;
      settings[k] = v;
      saveSettings();
      if (last) drawTime(last);
    });
  }
  $('keyform').addEventListener('submit', (e) => {
    e.preventDefault();
    localStorage.setItem(KEY, $('keyinput').value.trim());
    $('keyinput').value = '';
    $('keyform').hidden = true;
    $('forget').hidden = false;
    keyNeeded = false;
    load();
    poll();
  });
  $('forget').addEventListener('click', () => { localStorage.removeItem(KEY); location.reload(); });
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => { if (last) drawAll(last); });
  load();
  poll();
}

init();
