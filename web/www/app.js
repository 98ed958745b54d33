// app.js — the chat page. One WebSocket (ember.chat.v1, docs/protocol.md)
// streams answers; the conversations API (docs/api.md) keeps them, every
// branch of them: an edit or a regenerated answer becomes a sibling the
// user can switch back to (< n/m >), and the branch shown is stored as the
// conversation's current leaf. The open conversation is in the URL (/?c=ID).
// Settings and the API key are kept in this browser (localStorage). What
// the model, a title or a stored message says is untrusted: view.js puts
// text in with textContent and render.js sanitises rendered Markdown.
import { Socket, api, key, ApiError } from './conn.js';
import { Tree } from './tree.js';
import { renderInto } from './render.js';
import { message, editor, convList, statsText, el, button, icon, thought } from './view.js';
import { compose, readTextFile, describe, PASTE_CHARS, PASTE_LINES, MAX_FILE_BYTES } from './attach.js';

const $ = (id) => document.getElementById(id);
const chat = $('chat'), input = $('input'), sendBtn = $('send'), statusEl = $('status');

// ---- state ----

const S = {
  ready: null,            // the server's `ready` message
  everReady: false,
  lost: false,            // the socket dropped; reconnecting
  convs: [],
  view: { token: 0, id: null, tree: null, local: [] },   // local: messages of a chat the server keeps no copy of
  pending: null,          // the answer being generated (one at a time)
  timings: new Map(),     // message id -> done's timings (this browser's answers)
  cutoff: new Set(),      // ids of answers cut off by a lost connection
  branching: false,       // the server stores branches (parent_id, current_leaf_id)
  visited: new Map(),     // message id -> the leaf last shown under it: a switch back lands there
  files: [],              // attachments waiting to be sent: {name, text}
  notice: null,
  pastes: 0,
};
let nextReq = 1;

// ---- settings (localStorage) ----

const SETTINGS = 'ember.settings';
const NUM = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];
const INT = new Set(['top_k', 'max_tokens', 'seed']);

function loadSettings() {
  try { return Object.assign({ system: '', priority: '' }, JSON.parse(localStorage.getItem(SETTINGS) || '{}')); }
  catch (e) { return { system: '', priority: '' }; }
}
let settings = loadSettings();

function params() {
  const p = {};
  for (const k of NUM) if (settings[k] !== undefined && settings[k] !== '' && settings[k] !== null) p[k] = settings[k];
  if (settings.priority) p.priority = settings.priority;
  return p;
}

const TIMINGS = 'ember.timings';
try {
  for (const [k, v] of JSON.parse(localStorage.getItem(TIMINGS) || '[]')) S.timings.set(k, v);
} catch (e) { /* none kept */ }
function keepTiming(id, t) {
  S.timings.set(id, t);
  const all = [...S.timings.entries()].slice(-500);
  try { localStorage.setItem(TIMINGS, JSON.stringify(all)); } catch (e) { /* full or private */ }
}

// ---- the status strip under the messages ----

let noticeTimer = null;
function notify(text, kind = 'info', ms = 6000) {
  S.notice = { text, kind };
  clearTimeout(noticeTimer);
  if (ms) noticeTimer = setTimeout(() => { S.notice = null; showStatus(); }, ms);
  showStatus();
}

function showStatus() {
  const p = S.pending;
  statusEl.replaceChildren();
  statusEl.className = '';
  let shown = true;
  if (S.lost) {
    statusEl.className = 'warn';
    const left = Math.max(0, Math.ceil((sock.retryAt - Date.now()) / 1000));
    statusEl.append(el('span', null, sock.ws ? 'Connection lost. Reconnecting…' :
      'Connection lost. Reconnecting in ' + left + ' s.'));
    const b = el('button', 'plain-btn small', 'Retry now');
    b.type = 'button';
    b.addEventListener('click', () => sock.retryNow());
    statusEl.append(b);
  } else if (S.needKey) {
    statusEl.className = 'warn';
    statusEl.append(el('span', null, 'This server needs an API key.'));
    const b = el('button', 'plain-btn small', 'Enter a key');
    b.type = 'button';
    b.addEventListener('click', () => askKey());
    statusEl.append(b);
  } else if (p && (p.state === 'queued' || p.state === 'running')) {
    statusEl.className = 'busy';
    statusEl.append(el('span', 'spinner'));
    let t;
    if (p.state === 'queued') t = p.position > 0 ? 'Waiting in the queue: position ' + p.position : p.position === 0 ?
      'Reading the prompt…' : 'Sent…';
    else t = 'Generating' + (p.rate ? ' · ' + p.rate.toFixed(1) + ' tok/s' : '…');
    if (!isHere(p)) t += ' (in another conversation)';
    statusEl.append(el('span', 'gen-status', t));
    const b = el('button', 'plain-btn small', 'Stop');
    b.type = 'button';
    b.addEventListener('click', cancel);
    statusEl.append(b);
  } else if (S.notice) {
    statusEl.className = S.notice.kind;
    statusEl.append(el('span', null, S.notice.text));
  } else {
    shown = false;
  }
  statusEl.hidden = !shown;
  const running = !!(p && (p.state === 'queued' || p.state === 'running'));
  sendBtn.classList.toggle('stop', running);
  sendBtn.setAttribute('aria-label', running ? 'Stop generating' : 'Send');
  sendBtn.title = running ? 'Stop (Esc)' : 'Send (Enter)';
}
setInterval(() => { if (S.lost) showStatus(); }, 1000);

// ---- the socket ----

const sock = new Socket({
  open() { S.triedKey = false; /* the server speaks first: ready or auth_required */ },
  message: onFrame,
  close(info) {
    S.ready = null;
    const p = S.pending;
    if (p && (p.state === 'queued' || p.state === 'running')) {
      p.state = p.text ? 'cutoff' : 'lost';
      markLive();
    }
    if (info.code === 1008) S.needKey = true;
    S.lost = true;
    setModelLine();
    showStatus();
  },
});

function onFrame(m) {
  const p = S.pending;
  const mine = p && m.id !== undefined && m.id === p.reqId;
  switch (m.type) {
    case 'auth_required':
      S.needKey = true;
      S.lost = false;
      setModelLine();
      if (key.get()) sock.send({ type: 'auth', key: key.get() });
      else if (!$('keydlg').open) askKey();
      showStatus();
      break;
    case 'ready':
      onReady(m);
      break;
    case 'queued':
      if (mine) { p.position = m.position; p.state = p.state === 'running' ? 'running' : 'queued'; showStatus(); }
      break;
    case 'reasoning':
      if (mine) onReasoning(p, m.text);
      break;
    case 'token':
      if (mine) onToken(p, m.text);
      break;
    case 'done':
      if (mine) onDone(p, m);
      break;
    case 'error':
      onError(m, mine ? p : null);
      break;
    default:
      break;
  }
}

function onReady(m) {
  // a loopback client is ready at once; a stored key still makes it that key (its conversations)
  if (!m.key && key.get() && !S.triedKey) {
    S.triedKey = true;
    S.anonReady = m;
    sock.send({ type: 'auth', key: key.get() });
    return;
  }
  S.anonReady = null;
  const first = !S.everReady;
  const keyChanged = !first && S.lastKeyName !== m.key;
  S.ready = m;
  S.everReady = true;
  S.lost = false;
  S.needKey = false;
  S.lastKeyName = m.key;
  sock.ok();
  const kd = $('keydlg');
  if (kd.open) kd.close();
  showGenerates(m);
  setModelLine();
  showStatus();
  const listed = refreshList();
  if (first || keyChanged) listed.then((whole) => openFromUrl(false, whole));
  else if (S.view.id && !busy()) openConv(S.view.id, { push: false, quiet: true, keepScroll: true });
  else if (!S.view.id && S.pending && S.pending.mode === 'new' && S.pending.state === 'cutoff') findCutOff(S.pending, 1);
}

/** A new chat cut off before its done frame: the server stores what it generated when it sees the
 * socket go, so find that conversation (newer than any listed when it was sent, titled by its first
 * message) and open it with the answer marked. Asks up to 5 times, a second apart. */
async function findCutOff(p, attempt) {
  await refreshList();
  if (S.pending !== p || !isHere(p) || S.view.id) return;
  const c = S.convs.find((x) => x.id > p.maxConv && x.title && p.userText.startsWith(x.title));
  if (c) {
    p.convId = c.id;
    S.view.id = c.id;
    history.replaceState(null, '', '/?c=' + c.id);
    openConv(c.id, { push: false, quiet: true });
  } else if (attempt < 5) {
    setTimeout(() => findCutOff(p, attempt + 1), 1000);
  }
}

/** A model that generates no text (an encoder: embeddings and rerank only) gets no chat box, but
 * a note saying what it serves. */
function showGenerates(m) {
  const gen = m.generates_text !== false;
  $('compose').hidden = !gen;
  const note = $('no-chat');
  note.hidden = gen;
  note.textContent = gen ? '' : 'This model (' + m.model + ') does not generate text, so there is no chat here: ' +
    'it serves embeddings (POST /v1/embeddings) and rerank (POST /v1/rerank).';
}

function setModelLine() {
  const r = S.ready;
  const model = $('model');
  if (!r) {
    model.textContent = S.lost ? 'offline' : S.needKey ? 'waiting for an API key' : 'connecting…';
    model.title = '';
    return;
  }
  const parts = [r.model];
  if (r.device) parts.push(r.device);
  parts.push('context ' + r.context);
  if (r.key) parts.push('key ' + r.key);
  model.textContent = parts.join(' · ');
  model.title = parts.join('\n');
}

// ---- the key ----

function askKey(why) {
  const d = $('keydlg');
  $('key-error').textContent = why || '';
  if (!d.open) {
    $('key-input').value = key.get();
    d.showModal();
  }
  $('key-input').focus();
}

$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const k = $('key-input').value.trim();
  if (!k) { $('key-error').textContent = 'Enter a key.'; return; }
  key.set(k);
  S.triedKey = false;
  $('key-error').textContent = 'Checking…';
  if (sock.open) sock.send({ type: 'auth', key: k });
  else sock.retryNow();
});

const KEY_ERRORS = new Set(['invalid_api_key', 'missing_api_key', 'unauthorized']);

function keyRefused(code, msg) {
  key.clear();
  S.needKey = true;
  const why = code === 'missing_api_key' ? 'A key is needed here.' :
    code === 'unauthorized' ? 'The server wants a key before anything else.' :
    'The server refused this key: it is wrong, or it has been revoked.';
  askKey(why + (msg ? ' (' + code + ': ' + msg + ')' : ''));
  showStatus();
}

// ---- conversations list ----

let searchTimer = null;
$('search').addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(refreshList, 250);
});

let listSeq = 0;
async function refreshList() {
  const q = $('search').value.trim();
  const seq = ++listSeq;
  try {
    const j = await api('GET', '/api/conversations' + (q ? '?q=' + encodeURIComponent(q) : ''));
    if (seq !== listSeq) return false;
    S.convs = (j && j.data) || [];
  } catch (e) {
    if (seq !== listSeq) return false;
    if (apiAuth(e)) return false;
    S.convs = [];
    $('convs-empty').textContent = 'The conversation list could not be read: ' + e.message;
    $('convs-empty').hidden = false;
    $('convs').replaceChildren();
    return false;
  }
  drawList();
  return !q;
}

function drawList() {
  const q = $('search').value.trim();
  convList($('convs'), S.convs, S.view.id, (id) => { closeSide(); openConv(id, { push: true }); });
  const empty = $('convs-empty');
  empty.hidden = S.convs.length > 0;
  empty.textContent = q ? 'No conversation matches “' + q + '”.' : 'No conversations yet.';
}

function apiAuth(e) {
  if (e instanceof ApiError && e.status === 401) {
    keyRefused(e.code, e.message);
    return true;
  }
  return false;
}

// ---- opening a conversation ----

function urlId() {
  const c = new URLSearchParams(location.search).get('c');
  return c && /^\d{1,18}$/.test(c) ? Number(c) : null;
}

/** Open what the URL names. whole: S.convs is the key's whole list (no search), so an id
 * missing from it is known to be gone without asking. */
function openFromUrl(push, whole = false) {
  const id = urlId();
  if (id && whole && !S.convs.some((c) => c.id === id)) gone(id);
  else if (id) openConv(id, { push });
  else newChat({ push });
}

function gone(id) {
  notify('That conversation does not exist here (it was deleted, or it belongs to another key).', 'error');
  if (urlId() === id) history.replaceState(null, '', '/');
  if (S.view.id === id || !S.view.id) newChat({ push: false });
}

window.addEventListener('popstate', () => openFromUrl(false));

function newView(id) {
  S.view = { token: S.view.token + 1, id, tree: null, local: [] };
}

function newChat({ push = true } = {}) {
  newView(null);
  if (push && location.search) history.pushState(null, '', '/');
  render();
  drawList();
  input.focus();
}

let openSeq = 0;
async function openConv(id, { push = true, quiet = false, keepScroll = false } = {}) {
  const seq = ++openSeq;
  let conv;
  try {
    conv = await api('GET', '/api/conversations/' + id);
  } catch (e) {
    if (seq !== openSeq) return false;
    if (apiAuth(e)) return false;
    if (e.status === 404) {
      gone(id);
      refreshList();
    } else if (!quiet) {
      notify('The conversation could not be opened: ' + e.message, 'error');
    }
    return false;
  }
  if (seq !== openSeq) return false;
  const tree = new Tree(conv);
  if (tree.branching) S.branching = true;
  if (S.view.id !== id) newView(id);
  S.view.tree = tree;
  S.view.local = [];
  // answers this browser saw cut off: the stored one carries at least the text that arrived
  const p = S.pending;
  if (p && (p.state === 'cutoff' || p.state === 'lost') && p.convId === id) {
    let hit = 0;
    for (const n of tree.byId.values())
      if (n.id > p.lastId && n.role === 'assistant' && p.text && n.content.startsWith(p.text) &&
          n.finish_reason !== 'stop' && n.finish_reason !== 'length' && n.id > hit) hit = n.id;
    if (hit) S.cutoff.add(hit);
    if (hit || p.state === 'lost') S.pending = null;
  }
  if (p && p.timingFor === 'leaf' && p.convId === id) {
    const leaf = tree.get(tree.leaf);
    if (leaf && leaf.role === 'assistant') keepTiming(leaf.id, p.timing);
  }
  if (push && urlId() !== id) history.pushState(null, '', '/?c=' + id);
  render({ keepScroll });
  drawList();
  return true;
}

// ---- drawing the conversation ----

function titleOf() {
  const t = S.view.tree;
  if (t) return t.title || 'Untitled';
  const c = S.view.id && S.convs.find((x) => x.id === S.view.id);
  return c ? c.title || 'Untitled' : 'New chat';
}

function render({ keepScroll = false } = {}) {
  const v = S.view, t = v.tree, p = S.pending;
  const title = titleOf();
  $('title').textContent = title;
  document.title = (v.id ? title + ' — ' : '') + 'ember';
  $('conv-actions').hidden = !v.id;
  const stick = keepScroll ? nearBottom() : true;
  const top = chat.scrollTop;
  chat.replaceChildren();
  const here = p && p.state !== 'finishing' && isHere(p);
  let path = t ? t.path() : v.local;
  if (here && t && (p.mode === 'edit' || p.mode === 'regenerate')) path = p.cutAt ? t.path(p.cutAt) : [];
  if (t) for (const n of t.path()) S.visited.set(n.id, t.leaf);
  for (const n of path) chat.appendChild(drawMessage(n));
  if (here) {
    if (p.mode !== 'regenerate') chat.appendChild(message({ role: 'user', content: p.userText }));
    chat.appendChild(p.el);
  }
  if (!chat.children.length) chat.appendChild(welcome());
  if (stick) chat.scrollTop = chat.scrollHeight; else chat.scrollTop = top;
  showStatus();
}

function drawMessage(n) {
  const t = S.view.tree;
  let timing = S.timings.get(n.id);
  if (timing && n.tokens !== undefined && timing.completion_tokens !== n.tokens) timing = undefined;  // another db's id
  const opt = { timing, cutoff: S.cutoff.has(n.id) };
  if (t && t.branching && n.id) {
    opt.siblings = t.siblingPos(n.id);
    opt.onSibling = (step) => switchBranch(n.id, step);
    if (n.role === 'user') opt.onEdit = (ev) => startEdit(n, ev.currentTarget.closest('article'));
    if (n.role === 'assistant' && n.parent_id && t.get(n.parent_id) && t.get(n.parent_id).role === 'user')
      opt.onRegenerate = () => regenerate(n);
  }
  return message(n, opt);
}

function welcome() {
  const w = el('div', 'welcome');
  const img = el('img');
  img.src = '/static/icon.svg';
  img.alt = '';
  img.width = 48;
  img.height = 48;
  w.appendChild(img);
  const r = S.ready;
  w.appendChild(el('h2', null, r && r.generates_text === false ? 'Embeddings and rerank' : 'What can I help with?'));
  w.appendChild(el('p', 'muted', r ? r.model + (r.device ? ' on ' + r.device : '') : 'Connecting to the server…'));
  w.appendChild(el('p', 'muted small', 'Everything stays on this box: nothing you type leaves it.'));
  return w;
}

/** The pending answer belongs to the conversation on screen. */
function isHere(p) {
  return p.token === S.view.token || (!!p.convId && p.convId === S.view.id);
}

/** An answer is on its way (or being filed): no second one meanwhile. */
function busy() {
  const p = S.pending;
  return !!p && (p.state === 'queued' || p.state === 'running' || p.state === 'finishing');
}

function nearBottom() {
  return chat.scrollHeight - chat.scrollTop - chat.clientHeight < 80;
}

// ---- sending ----

function liveArticle() {
  const a = el('article', 'msg assistant live');
  a.setAttribute('aria-label', 'The model is answering');
  a.setAttribute('aria-busy', 'true');
  const body = el('div', 'body md');
  body.appendChild(el('span', 'typing', ''));
  a.appendChild(body);
  a.appendChild(el('div', 'livestats', 'waiting…'));
  return a;
}

function historyForNew() {
  // a chat the server keeps no copy of is sent whole each time
  const out = [];
  if (settings.system && settings.system.trim()) out.push({ role: 'system', content: settings.system });
  for (const n of S.view.local) if (n.role !== 'system' || !out.length) out.push({ role: n.role, content: n.content });
  return out;
}

/** Start a generation. mode: new | continue | edit | regenerate. */
function start(mode, { text = '', parentId = null, typed = '', files = [] } = {}) {
  if (busy()) return false;
  if (!sock.open || !S.ready) {
    notify(S.needKey ? 'Enter an API key first.' : 'Not connected to the server yet.', 'error');
    return false;
  }
  const v = S.view;
  const reqId = 'r' + nextReq++;
  const msg = { type: 'chat', id: reqId };
  if (!v.id) {
    msg.messages = historyForNew();
    msg.messages.push({ role: 'user', content: text });
    mode = 'new';
  } else {
    msg.conversation_id = v.id;
    if (mode === 'regenerate') {
      msg.regenerate = true;
      msg.parent_id = parentId;
    } else {
      msg.message = text;
      if (mode === 'edit') msg.parent_id = parentId;
      else if (S.branching && v.tree && v.tree.leaf) msg.parent_id = v.tree.leaf;
    }
  }
  const p = params();
  if (Object.keys(p).length) msg.params = p;
  const lastId = v.tree ? Math.max(0, ...v.tree.byId.keys()) : 0;   // what is stored for it will be newer
  const maxConv = Math.max(0, ...S.convs.map((c) => c.id));           // so will a new chat's conversation
  S.pending = { reqId, mode, token: v.token, convId: v.id, cutAt: parentId, userText: text, typed, files, lastId, maxConv,
    text: '', el: liveArticle(), state: 'queued', position: null, frames: 0, firstAt: 0, sentAt: Date.now(),
    rate: 0, drawn: false };
  sock.send(msg);
  render();
  return true;
}

function send() {
  const typed = input.value;
  const files = S.files.slice();
  const text = compose(typed, files);
  if (!text.trim()) return;
  if (!start(S.view.id ? 'continue' : 'new', { text, typed, files })) return;
  input.value = '';
  S.files = [];
  drawChips();
  autosize();
}

function cancel() {
  const p = S.pending;
  if (p && (p.state === 'queued' || p.state === 'running')) sock.send({ type: 'cancel', id: p.reqId });
}

function regenerate(n) {
  start('regenerate', { parentId: n.parent_id });
}

function startEdit(n, article) {
  if (S.pending && (S.pending.state === 'queued' || S.pending.state === 'running')) {
    notify('Wait for the answer to finish, or stop it, before editing.', 'info');
    return;
  }
  editor(article, n.content, (text) => {
    start('edit', { text, parentId: n.parent_id || 0 });   // 0: a new first message
  }, () => {});
}

async function switchBranch(id, step) {
  const t = S.view.tree;
  const sib = t && t.sibling(id, step);
  if (!sib) return;
  let leaf = S.visited.get(sib);
  if (!leaf || !t.path(leaf).some((n) => n.id === sib)) leaf = t.latestLeaf(sib);
  t.leaf = leaf;
  render({ keepScroll: true });
  const art = chat.querySelector('article[data-id="' + sib + '"]');
  if (art) {
    const b = art.querySelector(step < 0 ? '.sib .prev' : '.sib .next');
    (b && !b.disabled ? b : art.querySelector('.sib .pos') || art).focus?.();
  }
  // one PATCH after another: the last switch is the one the server keeps
  patches = patches.then(() => api('PATCH', '/api/conversations/' + t.id, { current_leaf_id: leaf })).catch((e) => {
    if (!apiAuth(e)) notify('The branch shown could not be saved: ' + e.message, 'error');
  });
  return patches;
}
let patches = Promise.resolve();

// ---- streaming ----

let drawQueued = false;
/** Reasoning before the answer: shown folded above it, timed until the answer's first text. */
function onReasoning(p, text) {
  if (!p.reasoning) p.thinkAt = performance.now();
  p.reasoning = (p.reasoning || '') + text;
  onToken(p, '');
}

function onToken(p, text) {
  if (p.state !== 'running') {
    p.state = 'running';
    p.firstAt = performance.now();
  }
  if (text && p.reasoning && p.thoughtS === undefined) p.thoughtS = (performance.now() - p.thinkAt) / 1000;
  p.text += text;
  p.frames++;
  const secs = (performance.now() - p.firstAt) / 1000;
  if (p.frames > 1 && secs > 0.2) p.rate = (p.frames - 1) / secs;
  if (!drawQueued) {
    drawQueued = true;
    requestAnimationFrame(() => {
      drawQueued = false;
      drawLive();
    });
  }
}

function drawLive() {
  const p = S.pending;
  if (!p) return;
  const stick = nearBottom();
  const body = p.el.querySelector(':scope > .body');
  if (p.reasoning) {
    const box = thought(p.reasoning, p.thoughtS), old = p.el.querySelector('.thought');
    if (old) { box.open = old.open; old.replaceWith(box); } else p.el.insertBefore(box, body);
  }
  renderInto(body, p.text, false);
  const ls = p.el.querySelector('.livestats');
  if (ls) ls.textContent = p.rate ? '≈ ' + p.rate.toFixed(1) + ' tok/s' : 'generating…';
  if (stick && isHere(p)) chat.scrollTop = chat.scrollHeight;
  showStatus();
}

function markLive() {
  const p = S.pending;
  if (!p) return;
  drawLive();
  p.el.classList.remove('live');
  p.el.removeAttribute('aria-busy');
  const ls = p.el.querySelector('.livestats');
  if (ls) ls.remove();
  if (p.state === 'cutoff') {
    p.el.classList.add('cutoff');
    p.el.appendChild(el('div', 'cut-note', 'Cut off: the connection to the server was lost during this answer.'));
  } else if (p.state === 'lost') {
    p.el.querySelector('.body').replaceChildren(el('p', 'error', 'The connection was lost before an answer came.'));
    restoreComposer(p);
  }
}

function restoreComposer(p) {
  if (p.mode === 'regenerate' || input.value.trim() || S.files.length) return;
  input.value = p.mode === 'edit' ? p.userText : p.typed;
  if (p.mode !== 'edit') S.files = p.files.slice();
  drawChips();
  autosize();
}

async function onDone(p, m) {
  drawLive();
  const timing = { ttft_ms: m.timings ? m.timings.ttft_ms : null, tokens_per_s: m.timings ? m.timings.tokens_per_s : null,
    completion_tokens: m.usage ? m.usage.completion_tokens : undefined, prompt_tokens: m.usage && m.usage.prompt_tokens,
    finish_reason: m.finish_reason };
  if (p.reasoning) {   // kept with the answer in this browser (the server stores the answer alone)
    timing.reasoning = p.reasoning;
    timing.thought_s = p.thoughtS !== undefined ? p.thoughtS : (performance.now() - p.thinkAt) / 1000;
  }
  p.timing = timing;
  p.state = 'finishing';
  p.el.classList.remove('live');
  p.el.removeAttribute('aria-busy');
  const ls = p.el.querySelector('.livestats');
  if (ls) { ls.className = 'meta'; ls.textContent = statsText({ finish_reason: m.finish_reason }, timing); }
  showStatus();
  if (m.message_id) { S.branching = true; keepTiming(m.message_id, timing); } else p.timingFor = 'leaf';
  const here = isHere(p);
  if (m.conversation_id) {
    p.convId = m.conversation_id;
    if (here && !S.view.id) {
      S.view.id = m.conversation_id;
      history.replaceState(null, '', '/?c=' + m.conversation_id);
    }
    const ok = here && await openConv(m.conversation_id, { push: false, quiet: true, keepScroll: true });
    if (S.pending === p) S.pending = null;
    if (here && !ok) render({ keepScroll: true });
    refreshList();
  } else {
    // nothing stored: an empty answer, or a server that keeps no content
    S.pending = null;
    if (here && p.text) {
      const base = S.view.tree ? S.view.tree.path() : S.view.local;
      S.view.local = base.concat([{ role: 'user', content: p.userText },
        { role: 'assistant', content: p.text, finish_reason: m.finish_reason, tokens: timing.completion_tokens }]);
      S.view.tree = null;
      const last = S.view.local[S.view.local.length - 1];
      render();
      const arts = chat.querySelectorAll('article.assistant');
      if (arts.length) arts[arts.length - 1].querySelector('.meta').textContent = statsText(last, timing);
      notify('This server keeps no history: this chat lives in this tab only.', 'info');
    } else {
      if (here) {
        restoreComposer(p);
        notify(m.finish_reason === 'cancelled' ? 'Stopped before any answer came: your message is back in the box.' :
          'The model gave an empty answer.', 'info');
      }
      render({ keepScroll: true });
    }
  }
  showStatus();
}

function onError(m, p) {
  const msg = (m.message || m.code || 'error');
  if (KEY_ERRORS.has(m.code) && S.anonReady) {
    // a loopback client whose kept key was refused: it may go on without one
    key.clear();
    notify('The key kept in this browser was refused (' + m.code + '); going on without a key.', 'error', 10000);
    onReady(S.anonReady);
    return;
  }
  if (KEY_ERRORS.has(m.code)) {
    if (p) { S.pending = null; restoreComposer(p); render(); }
    keyRefused(m.code, m.message);
    return;
  }
  if (!p) {
    notify(m.code + ': ' + msg, 'error', 10000);
    return;
  }
  S.pending = null;
  const here = isHere(p);
  if (here) {
    restoreComposer(p);
    render({ keepScroll: true });
    const note = el('div', 'msg error-box');
    note.setAttribute('role', 'alert');
    note.appendChild(el('strong', null, m.code));
    note.appendChild(el('span', null, ' ' + msg + (m.retry_after_s ? ' (try again in ' + m.retry_after_s + ' s)' : '')));
    chat.appendChild(note);
    chat.scrollTop = chat.scrollHeight;
  } else {
    notify(m.code + ': ' + msg, 'error', 10000);
  }
  showStatus();
}

// ---- the composer ----

function autosize() {
  input.style.height = 'auto';
  input.style.height = Math.min(input.scrollHeight + 2, Math.round(window.innerHeight * 0.4)) + 'px';
}
input.addEventListener('input', autosize);

$('compose').addEventListener('submit', (e) => {
  e.preventDefault();
  const p = S.pending;
  if (p && (p.state === 'queued' || p.state === 'running')) cancel();
  else send();
});

input.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
    e.preventDefault();
    const p = S.pending;
    if (!(p && (p.state === 'queued' || p.state === 'running'))) send();
  }
});

document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape' || document.querySelector('dialog[open]')) return;
  const p = S.pending;
  if (p && (p.state === 'queued' || p.state === 'running')) { e.preventDefault(); cancel(); return; }
  if (document.body.classList.contains('side-open')) closeSide();
});

function drawChips() {
  const box = $('chips');
  box.replaceChildren();
  S.files.forEach((f, i) => {
    const c = el('span', 'chip');
    c.title = f.text.slice(0, 300);
    c.appendChild(icon('file'));
    c.appendChild(el('span', 'fname', f.name));
    c.appendChild(el('span', 'fsize', describe(f.text)));
    const x = button('chip-x', 'Remove ' + f.name, 'close');
    x.addEventListener('click', () => { S.files.splice(i, 1); drawChips(); input.focus(); });
    c.appendChild(x);
    box.appendChild(c);
  });
  box.hidden = !S.files.length;
}

async function attachFiles(list) {
  for (const f of list) {
    try {
      const got = await readTextFile(f);
      const total = S.files.reduce((s, x) => s + x.text.length, 0) + got.text.length;
      if (total > 3 * MAX_FILE_BYTES) throw new Error('the attachments together are too large for one message');
      S.files.push(got);
    } catch (e) {
      notify(e.message, 'error');
    }
  }
  drawChips();
}

$('attach-file').addEventListener('change', async (e) => {
  await attachFiles([...e.target.files]);
  e.target.value = '';
  input.focus();
});

input.addEventListener('paste', (e) => {
  const cd = e.clipboardData;
  if (!cd) return;
  if (cd.files && cd.files.length) {
    e.preventDefault();
    attachFiles([...cd.files]);
    return;
  }
  const text = cd.getData('text/plain');
  if (text.length > PASTE_CHARS || text.split('\n').length > PASTE_LINES) {
    e.preventDefault();
    S.files.push({ name: 'pasted-' + (++S.pastes) + '.txt', text });
    drawChips();
  }
});

const composeForm = $('compose');
composeForm.addEventListener('dragover', (e) => {
  if (e.dataTransfer && [...e.dataTransfer.types].includes('Files')) { e.preventDefault(); composeForm.classList.add('drop'); }
});
composeForm.addEventListener('dragleave', () => composeForm.classList.remove('drop'));
composeForm.addEventListener('drop', (e) => {
  composeForm.classList.remove('drop');
  if (e.dataTransfer && e.dataTransfer.files.length) { e.preventDefault(); attachFiles([...e.dataTransfer.files]); }
});

// ---- rename, delete, export, import ----

$('rename').addEventListener('click', () => {
  if (!S.view.id) return;
  $('rename-input').value = titleOf();
  $('rename-error').textContent = '';
  $('renamedlg').showModal();
  $('rename-input').select();
});
$('rename-cancel').addEventListener('click', () => $('renamedlg').close());
$('rename-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const title = $('rename-input').value.trim();
  if (!title) { $('rename-error').textContent = 'A title cannot be empty.'; return; }
  const id = S.view.id;
  try {
    await api('PATCH', '/api/conversations/' + id, { title });
  } catch (err) {
    if (!apiAuth(err)) $('rename-error').textContent = 'Not renamed: ' + err.message;
    return;
  }
  $('renamedlg').close();
  if (S.view.id === id && S.view.tree) S.view.tree.title = title;
  render({ keepScroll: true });
  refreshList();
});

$('delete').addEventListener('click', () => {
  if (!S.view.id) return;
  $('confirm-text').textContent = '“' + titleOf() + '” and every message in it, every branch, will be deleted from the server.';
  $('confirmdlg').returnValue = '';
  $('confirmdlg').showModal();
  $('confirm-no').focus();
});
$('confirmdlg').addEventListener('close', async () => {
  if ($('confirmdlg').returnValue !== 'yes') return;
  const id = S.view.id;
  try {
    await api('DELETE', '/api/conversations/' + id);
  } catch (err) {
    if (!apiAuth(err)) notify('Not deleted: ' + err.message, 'error');
    return;
  }
  notify('Deleted “' + titleOf() + '”.', 'info');
  if (S.view.id === id) newChat({ push: true });
  refreshList();
});

function download(name, obj) {
  const blob = new Blob([JSON.stringify(obj, null, 2)], { type: 'application/json' });
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

const today = () => new Date().toISOString().slice(0, 10);

$('export-one').addEventListener('click', async () => {
  const id = S.view.id;
  if (!id) return;
  try {
    const j = await api('GET', '/api/conversations/' + id + '/export');
    const slug = titleOf().toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '').slice(0, 40);
    download('ember-conversation-' + id + (slug ? '-' + slug : '') + '.json', j);
  } catch (err) {
    if (!apiAuth(err)) notify('Not exported: ' + err.message, 'error');
  }
});

$('export-all').addEventListener('click', async () => {
  try {
    const j = await api('GET', '/api/conversations/export');
    download('ember-conversations-' + today() + '.json', j);
    notify('Exported ' + ((j && j.conversations) || []).length + ' conversations.', 'info');
  } catch (err) {
    if (!apiAuth(err)) notify('Not exported: ' + err.message, 'error');
  }
});

$('import-file').addEventListener('change', async (e) => {
  const f = e.target.files[0];
  e.target.value = '';
  if (!f) return;
  let j;
  try {
    j = JSON.parse(await f.text());
    if (!j || typeof j !== 'object' || !Array.isArray(j.conversations)) throw new Error('no "conversations" in it');
  } catch (err) {
    notify(f.name + ' is not an ember export: ' + err.message, 'error');
    return;
  }
  try {
    const r = await api('POST', '/api/conversations/import', j);
    const ids = (r && r.imported) || [];
    notify('Imported ' + ids.length + (ids.length === 1 ? ' conversation.' : ' conversations.'), 'info');
    await refreshList();
    if (ids.length) { closeSide(); openConv(ids[0], { push: true }); }
  } catch (err) {
    if (!apiAuth(err)) notify('Not imported: ' + err.message, 'error', 10000);
  }
});

$('new-chat').addEventListener('click', () => { closeSide(); newChat({ push: true }); });
$('brand').addEventListener('click', (e) => { e.preventDefault(); closeSide(); newChat({ push: true }); });

// ---- settings ----

function fillSettings() {
  $('s-system').value = settings.system || '';
  for (const k of NUM) $('s-' + k).value = settings[k] === undefined || settings[k] === null ? '' : settings[k];
  $('s-priority').value = settings.priority || '';
  const r = S.ready;
  $('s-key-state').textContent = key.get() ? (r && r.key ? 'Using the key “' + r.key + '”.' : 'A key is kept in this browser.')
    : 'No key kept in this browser' + (r ? ' (this server does not ask this browser for one).' : '.');
  $('s-forget-key').hidden = !key.get();
  $('s-error').textContent = '';
}

$('open-settings').addEventListener('click', () => {
  fillSettings();
  closeSide();
  $('settings').showModal();
});
$('s-cancel').addEventListener('click', () => $('settings').close());
$('s-reset').addEventListener('click', () => {
  $('s-system').value = '';
  for (const k of NUM) $('s-' + k).value = '';
  $('s-priority').value = '';
});
$('s-forget-key').addEventListener('click', () => {
  key.clear();
  S.triedKey = false;
  $('settings').close();
  notify('The key is forgotten.', 'info');
  if (sock.ws) sock.ws.close();
});
$('settings-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const next = { system: $('s-system').value, priority: $('s-priority').value };
  for (const k of NUM) {
    const f = $('s-' + k);
    if (f.value === '') continue;
    const v = Number(f.value);
    if (!f.checkValidity() || !Number.isFinite(v) || (INT.has(k) && !Number.isInteger(v))) {
      $('s-error').textContent = f.parentElement.firstChild.textContent.trim() + ': ' + (f.validationMessage || 'not a valid number');
      f.focus();
      return;
    }
    next[k] = v;
  }
  settings = next;
  try { localStorage.setItem(SETTINGS, JSON.stringify(settings)); } catch (err) { /* this tab only */ }
  $('settings').close();
  notify('Settings saved.', 'info', 3000);
});

// ---- the sidebar on a narrow screen ----

function openSide() {
  document.body.classList.add('side-open');
  $('backdrop').hidden = false;
  $('open-side').setAttribute('aria-expanded', 'true');
  $('search').focus();
}
function closeSide() {
  if (!document.body.classList.contains('side-open')) return;
  document.body.classList.remove('side-open');
  $('backdrop').hidden = true;
  $('open-side').setAttribute('aria-expanded', 'false');
}
$('open-side').addEventListener('click', openSide);
$('close-side').addEventListener('click', () => { closeSide(); $('open-side').focus(); });
$('backdrop').addEventListener('click', closeSide);

// ---- go ----

window.addEventListener('online', () => sock.retryNow());
render();
autosize();
drawChips();
sock.connect();
