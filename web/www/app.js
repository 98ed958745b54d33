// app.js — the chat page: one WebSocket (ember.chat.v1, docs/protocol.md)
// to the server that served the page; messages stream in as Markdown,
// rendered by markdown-it and sanitised by DOMPurify before they touch the
// page (model output is untrusted), code highlighted by highlight.js.
const md = window.markdownit({ html: false, linkify: false, highlight: (code, lang) => {
  try { return lang && window.hljs.getLanguage(lang) ? window.hljs.highlight(lang, code).value : ''; }
  catch (e) { return ''; } } });
const chat = document.getElementById('chat');
const input = document.getElementById('input');
const statusEl = document.getElementById('status');
let ws = null, next = 1, live = null, conversation = null;

function render(text) {
  return window.DOMPurify.sanitize(md.render(text));
}

function add(role, text) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  if (role === 'user') div.textContent = text; else div.innerHTML = render(text);
  chat.appendChild(div);
  chat.scrollTop = chat.scrollHeight;
  return div;
}

function connect() {
  ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws', 'ember.chat.v1');
  ws.onmessage = (ev) => {
    const m = JSON.parse(ev.data);
    if (m.type === 'ready') {
      document.getElementById('model').textContent = m.model + ' · context ' + m.context;
      statusEl.textContent = '';
    } else if (m.type === 'queued' && live) {
      statusEl.textContent = m.position > 0 ? 'queued: ' + m.position + ' ahead' : 'generating';
    } else if (m.type === 'token' && live) {
      live.text += m.text;
      live.el.innerHTML = render(live.text);
      chat.scrollTop = chat.scrollHeight;
    } else if (m.type === 'done' && live) {
      conversation = m.conversation_id;
      const meta = document.createElement('div');
      meta.className = 'meta';
      meta.textContent = m.usage.completion_tokens + ' tokens · first token ' + Math.round(m.timings.ttft_ms) +
        ' ms · ' + m.timings.tokens_per_s.toFixed(1) + ' tok/s · ' + m.finish_reason;
      live.el.after(meta);
      live = null;
      statusEl.textContent = '';
    } else if (m.type === 'error') {
      statusEl.textContent = m.code + ': ' + m.message;
      live = null;
    }
  };
  ws.onclose = () => { statusEl.textContent = 'connection lost; reconnecting'; setTimeout(connect, 1000); };
}

function send() {
  const text = input.value;
  if (!text.trim() || live || !ws || ws.readyState !== 1) return;
  add('user', text);
  input.value = '';
  live = { text: '', el: add('assistant', '') };
  const msg = conversation ? { type: 'chat', id: String(next++), conversation_id: conversation, message: text }
                           : { type: 'chat', id: String(next++), messages: [{ role: 'user', content: text }] };
  ws.send(JSON.stringify(msg));
}

document.getElementById('compose').addEventListener('submit', (e) => { e.preventDefault(); send(); });
input.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(); }
  if (e.key === 'Escape' && live) ws.send(JSON.stringify({ type: 'cancel', id: String(next - 1) }));
});
connect();
