// view.js — building the page's pieces: a message (user text and titles
// only ever through textContent; model output only through render.js), the
// conversation list, the answer's stats line, small SVG icons. No state
// lives here: app.js owns it and passes what a piece needs.
import { renderInto, copyText } from './render.js';
import { split, describe } from './attach.js';

const SVG = 'http://www.w3.org/2000/svg';
const ICONS = {
  copy: 'M8 8h11v11H8zM5 16V5h11',
  edit: 'M4 20h4L19 9l-4-4L4 16z',
  regen: 'M20 12a8 8 0 1 1-2.3-5.6M20 4v5h-5',
  prev: 'M15 6l-6 6 6 6',
  next: 'M9 6l6 6-6 6',
  file: 'M6 3h8l4 4v14H6zM14 3v4h4',
  close: 'M6 6l12 12M18 6L6 18',
};

export function icon(name) {
  const s = document.createElementNS(SVG, 'svg');
  s.setAttribute('viewBox', '0 0 24 24');
  s.setAttribute('aria-hidden', 'true');
  const p = document.createElementNS(SVG, 'path');
  p.setAttribute('d', ICONS[name]);
  s.appendChild(p);
  return s;
}

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

export function button(cls, label, iconName, text) {
  const b = el('button', cls);
  b.type = 'button';
  b.setAttribute('aria-label', label);
  b.title = label;
  if (iconName) b.appendChild(icon(iconName));
  if (text) b.appendChild(el('span', null, text));
  return b;
}

export const FINISH = { stop: 'stop', length: 'length (token limit)', cancelled: 'stopped' };

/** The line under an answer: tokens · first token · tok/s · finish reason. */
export function statsText(n, timing) {
  if (!timing && !n.finish_reason && !n.tokens) return '';   // not generated here (sent or imported as is)
  const parts = [];
  const tokens = timing && timing.completion_tokens !== undefined ? timing.completion_tokens : n.tokens;
  if (tokens !== undefined && tokens !== null) parts.push(tokens + (tokens === 1 ? ' token' : ' tokens'));
  if (timing && timing.ttft_ms !== null && timing.ttft_ms !== undefined)
    parts.push('first token ' + Math.round(timing.ttft_ms) + ' ms');
  if (timing && timing.tokens_per_s !== null && timing.tokens_per_s !== undefined)
    parts.push(timing.tokens_per_s.toFixed(1) + ' tok/s');
  const fin = n.finish_reason || (timing && timing.finish_reason);
  if (fin) parts.push(FINISH[fin] || fin);
  return parts.join(' · ');
}

function userBody(content) {
  const body = el('div', 'body');
  for (const part of split(content)) {
    if (part.file !== undefined) {
      const d = el('details', 'file');
      const s = el('summary');
      s.appendChild(icon('file'));
      s.appendChild(el('span', 'fname', part.file));
      s.appendChild(el('span', 'fsize', describe(part.content)));
      d.appendChild(s);
      d.appendChild(el('pre', null, part.content));
      body.appendChild(d);
    } else {
      body.appendChild(el('div', 'text', part.text));
    }
  }
  return body;
}

/** The reasoning an answer began with, folded: "Thinking…" while it comes,
 * "Thought for 3.2 s" once the answer starts (secs null: still thinking). */
export function thought(text, secs) {
  const d = el('details', 'thought');
  d.appendChild(el('summary', null, secs === null || secs === undefined ? 'Thinking…'
    : 'Thought for ' + (secs < 10 ? secs.toFixed(1) : Math.round(secs)) + ' s'));
  d.appendChild(el('div', 'thought-text', text));
  return d;
}

/**
 * One message as an <article>. n: {id, role, content, tokens, finish_reason}; opt: {
 *   siblings: [index, count] | null, onSibling(step), onEdit(), onRegenerate(), timing, cutoff, modelName }
 */
export function message(n, opt = {}) {
  const a = el('article', 'msg ' + n.role);
  if (n.id) a.dataset.id = n.id;
  if (n.role === 'system') {
    const d = el('details', 'system-box');
    d.appendChild(el('summary', null, 'System prompt'));
    d.appendChild(el('div', 'body', n.content));
    a.appendChild(d);
    a.setAttribute('aria-label', 'System prompt');
    return a;
  }
  a.setAttribute('aria-label', n.role === 'user' ? 'You said' : 'The model answered');
  if (n.role === 'user') {
    a.appendChild(userBody(n.content));
  } else {
    if (opt.timing && opt.timing.reasoning) a.appendChild(thought(opt.timing.reasoning, opt.timing.thought_s));
    const body = el('div', 'body md');
    renderInto(body, n.content);
    a.appendChild(body);
    if (opt.cutoff) {
      a.classList.add('cutoff');
      a.appendChild(el('div', 'cut-note', 'Cut off: the connection to the server was lost during this answer.'));
    }
  }
  const tools = el('div', 'tools');
  if (opt.siblings && opt.siblings[1] > 1) {
    const [i, count] = opt.siblings;
    const nav = el('div', 'sib');
    nav.setAttribute('role', 'group');
    nav.setAttribute('aria-label', 'Versions of this message');
    const prev = button('icon-btn small prev', 'Previous version', 'prev');
    const next = button('icon-btn small next', 'Next version', 'next');
    prev.disabled = i <= 0;
    next.disabled = i >= count - 1;
    prev.addEventListener('click', () => opt.onSibling(-1));
    next.addEventListener('click', () => opt.onSibling(1));
    nav.append(prev, el('span', 'pos', (i + 1) + '/' + count), next);
    tools.appendChild(nav);
  }
  const copy = button('icon-btn small copy', 'Copy this message', 'copy');
  copy.addEventListener('click', async () => {
    const ok = await copyText(n.content);
    copy.classList.toggle('done', ok);
    copy.title = ok ? 'Copied' : 'Copy failed';
    setTimeout(() => { copy.classList.remove('done'); copy.title = 'Copy this message'; }, 1500);
  });
  tools.appendChild(copy);
  if (n.role === 'user' && opt.onEdit) {
    const b = button('icon-btn small edit', 'Edit and resend', 'edit');
    b.addEventListener('click', opt.onEdit);
    tools.appendChild(b);
  }
  if (n.role === 'assistant' && opt.onRegenerate) {
    const b = button('icon-btn small regen', 'Regenerate this answer', 'regen');
    b.addEventListener('click', opt.onRegenerate);
    tools.appendChild(b);
  }
  if (n.role === 'assistant') {
    const stats = statsText(n, opt.timing);
    if (stats) tools.appendChild(el('span', 'meta', stats));
  }
  a.appendChild(tools);
  return a;
}

/** The editor that replaces a user message's body: onSend(text), onCancel(). */
export function editor(article, content, onSend, onCancel) {
  const box = el('div', 'edit-box');
  const ta = el('textarea');
  ta.value = content;
  ta.setAttribute('aria-label', 'Edit the message');
  ta.rows = Math.min(12, Math.max(2, content.split('\n').length));
  const row = el('div', 'edit-buttons');
  const cancel = el('button', 'plain-btn', 'Cancel');
  cancel.type = 'button';
  const send = el('button', 'primary-btn', 'Send');
  send.type = 'button';
  row.append(cancel, send);
  box.append(ta, row);
  const body = article.querySelector('.body');
  const tools = article.querySelector('.tools');
  body.hidden = true;
  if (tools) tools.hidden = true;
  article.insertBefore(box, body);
  article.classList.add('editing');
  const close = () => { box.remove(); body.hidden = false; if (tools) tools.hidden = false; article.classList.remove('editing'); };
  const go = () => { if (ta.value.trim()) { close(); onSend(ta.value); } };
  cancel.addEventListener('click', () => { close(); onCancel(); });
  send.addEventListener('click', go);
  ta.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); go(); }
    if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); close(); onCancel(); }
  });
  ta.focus();
  ta.setSelectionRange(ta.value.length, ta.value.length);
}

function dayLabel(ms, now) {
  const d = new Date(ms), t = new Date(now);
  const start = new Date(t.getFullYear(), t.getMonth(), t.getDate()).getTime();
  if (ms >= start) return 'Today';
  if (ms >= start - 86400000) return 'Yesterday';
  if (ms >= start - 6 * 86400000) return 'Previous 7 days';
  if (d.getFullYear() === t.getFullYear()) return d.toLocaleDateString(undefined, { month: 'long' });
  return String(d.getFullYear());
}

export function timeLabel(ms) {
  const d = new Date(ms), t = new Date();
  if (d.toDateString() === t.toDateString()) return d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
  return d.toLocaleDateString(undefined, { day: 'numeric', month: 'short' });
}

/** The conversation list: <li> group headings and links; onOpen(id). */
export function convList(ul, convs, currentId, onOpen) {
  ul.replaceChildren();
  let group = null;
  const now = Date.now();
  for (const c of convs) {
    const g = dayLabel(c.updated_ms, now);
    if (g !== group) {
      group = g;
      ul.appendChild(el('li', 'group', g));
    }
    const li = el('li', 'conv');
    const a = el('a');
    a.href = '/?c=' + encodeURIComponent(c.id);
    a.dataset.id = c.id;
    a.appendChild(el('span', 'ctitle', c.title || 'Untitled'));
    a.appendChild(el('span', 'cdate', timeLabel(c.updated_ms)));
    if (c.id === currentId) a.setAttribute('aria-current', 'page');
    a.addEventListener('click', (e) => {
      if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
      e.preventDefault();
      onOpen(c.id);
    });
    li.appendChild(a);
    ul.appendChild(li);
  }
}
