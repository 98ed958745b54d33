// conn.js — the page's links to the server that served it: one WebSocket
// (ember.chat.v1, docs/protocol.md) that reconnects with backoff (1, 2, 4 …
// 30 s) when it drops, and fetch() for the conversations API with the
// browser's API key as a Bearer token. The key lives in localStorage.

const KEY_STORE = 'ember.key';

export const key = {
  get() { try { return localStorage.getItem(KEY_STORE) || ''; } catch (e) { return ''; } },
  set(k) { try { localStorage.setItem(KEY_STORE, k); } catch (e) { /* private mode: this tab only */ } },
  clear() { try { localStorage.removeItem(KEY_STORE); } catch (e) { /* nothing kept */ } },
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** fetch() a JSON answer from the API; throws ApiError with the server's code and message. */
export async function api(method, path, body) {
  const h = {};
  const k = key.get();
  if (k) h.Authorization = 'Bearer ' + k;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  let r;
  try {
    r = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store', credentials: 'omit' });
  } catch (e) {
    throw new ApiError(0, 'network', 'the server cannot be reached');
  }
  const text = await r.text();
  let j = null;
  try { j = text ? JSON.parse(text) : null; } catch (e) { j = null; }
  if (!r.ok) {
    const err = j && j.error ? j.error : {};
    throw new ApiError(r.status, err.code || String(r.status), err.message || r.statusText || 'request failed');
  }
  return j;
}

/** The WebSocket, reconnecting. handlers: open(), message(obj), close(info {code, retryIn}). */
export class Socket {
  constructor(handlers) {
    this.h = handlers;
    this.ws = null;
    this.attempt = 0;
    this.timer = null;
    this.retryAt = 0;
  }

  connect() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.ws && this.ws.readyState <= 1) return;
    const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws';
    const ws = new WebSocket(url, 'ember.chat.v1');
    this.ws = ws;
    ws.onopen = () => { if (this.ws === ws) this.h.open(); };
    ws.onmessage = (ev) => {
      if (this.ws !== ws) return;
      let m;
      try { m = JSON.parse(ev.data); } catch (e) { return; }
      if (m && typeof m === 'object') this.h.message(m);
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      const delay = Math.min(30, 2 ** Math.min(this.attempt, 5));
      this.attempt++;
      this.retryAt = Date.now() + delay * 1000;
      this.timer = setTimeout(() => this.connect(), delay * 1000);
      this.h.close({ code: ev.code, reason: ev.reason, retryIn: delay });
    };
  }

  /** The connection works (the server said ready): the next drop starts at 1 s again. */
  ok() { this.attempt = 0; }

  get open() { return !!this.ws && this.ws.readyState === 1; }

  send(obj) {
    if (!this.open) return false;
    this.ws.send(JSON.stringify(obj));
    return true;
  }

  retryNow() { if (!this.ws) this.connect(); }
}
