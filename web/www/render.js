// render.js — model output to safe HTML. Model output is untrusted: it is
// parsed by markdown-it with raw HTML off (a `<script>` in the text stays
// text), math spans ($…$, $$…$$, \(…\), \[…\]) are picked out by two
// markdown-it rules (so code spans and fenced blocks are never touched, and
// Markdown never mangles the TeX) and typeset by KaTeX (trust off), code is
// highlighted by highlight.js, and the whole result goes through DOMPurify
// before it reaches the page. Images are off (a model must not make the
// browser fetch anything). enhanceCode() adds a language label and a copy
// button to each code block of rendered output.
const hljs = window.hljs;
const katex = window.katex;
const DOMPurify = window.DOMPurify;

hljs.configure({ hideUpgradeWarningAcceptNoSupportOrSecurityUpdates: true,
  languages: ['python', 'javascript', 'typescript', 'c', 'cpp', 'cs', 'java', 'go', 'rust', 'bash', 'shell',
    'json', 'xml', 'css', 'sql', 'yaml', 'ini', 'diff', 'php', 'ruby', 'kotlin', 'swift', 'markdown'] });

const md = window.markdownit({ html: false, linkify: false, typographer: false, breaks: true,
  highlight: highlightCode });
md.disable('image');
md.use(mathPlugin);

function escapeHtml(s) { return md.utils.escapeHtml(s); }

// The fence's info string is untrusted: only a plain language name survives.
function langOf(info) {
  const m = /^[A-Za-z0-9_+#.-]{1,32}$/.exec((info || '').trim().split(/\s+/)[0] || '');
  return m ? m[0].toLowerCase() : '';
}

function highlightCode(code, info) {
  const lang = langOf(info);
  let body = '';
  try {
    if (lang && hljs.getLanguage(lang)) body = hljs.highlight(lang, code, true).value;
    else if (!lang && code.length < 20000) body = hljs.highlightAuto(code).value;
  } catch (e) { body = ''; }
  if (!body) body = escapeHtml(code);
  const cls = 'hljs' + (lang ? ' language-' + lang : '');
  return '<pre><code class="' + cls + '">' + body + '</code></pre>\n';
}

// ---- math: markdown-it rules that only find the delimiters; KaTeX does the rest ----

function katexHtml(tex, display) {
  try {
    return katex.renderToString(tex, { displayMode: display, throwOnError: false, strict: 'ignore', trust: false,
      output: 'htmlAndMathml', maxSize: 20, maxExpand: 500 });
  } catch (e) {
    return '<code class="math-error">' + escapeHtml(tex) + '</code>';
  }
}

function mathPlugin(mdi) {
  mdi.inline.ruler.before('escape', 'math_inline', mathInline);
  mdi.block.ruler.before('fence', 'math_block', mathBlock, { alt: ['paragraph', 'reference', 'blockquote', 'list'] });
  mdi.renderer.rules.math_inline = (tokens, i) => katexHtml(tokens[i].content, tokens[i].meta.display);
  mdi.renderer.rules.math_block = (tokens, i) =>
    '<div class="math-block">' + katexHtml(tokens[i].content, true) + '</div>\n';
}

const DELIMS = [['$$', '$$', true], ['\\[', '\\]', true], ['\\(', '\\)', false], ['$', '$', false]];

function mathInline(state, silent) {
  const src = state.src, start = state.pos, max = state.posMax;
  const c = src.charCodeAt(start);
  if (c !== 0x24 /* $ */ && c !== 0x5c /* \ */) return false;
  for (const [open, close, display] of DELIMS) {
    if (!src.startsWith(open, start)) continue;
    const from = start + open.length;
    let end = from;
    for (;;) {
      end = src.indexOf(close, end);
      if (end < 0 || end + close.length > max) return false;
      if (open === '$' && src.charCodeAt(end - 1) === 0x5c) { end += 1; continue; }   // \$ inside
      break;
    }
    const tex = src.slice(from, end);
    if (!tex.trim()) return false;
    // $…$ as pandoc reads it: no space just inside the dollars, no digit just after
    // the closing one ("$5 and $10" stays text)
    if (open === '$' && (/^\s/.test(tex) || /\s$/.test(tex) || /[0-9]/.test(src.charAt(end + 1)))) return false;
    if (!silent) {
      const t = state.push('math_inline', 'math', 0);
      t.content = tex;
      t.markup = open;
      t.meta = { display };
    }
    state.pos = end + close.length;
    return true;
  }
  return false;
}

function mathBlock(state, startLine, endLine, silent) {
  const src = state.src;
  let pos = state.bMarks[startLine] + state.tShift[startLine];
  let max = state.eMarks[startLine];
  if (state.sCount[startLine] - state.blkIndent >= 4) return false;
  const line = src.slice(pos, max);
  let open, close;
  if (line.startsWith('$$')) { open = '$$'; close = '$$'; }
  else if (line.startsWith('\\[')) { open = '\\['; close = '\\]'; }
  else return false;
  const first = line.slice(open.length).trimEnd();
  let tex = null, next = startLine;
  if (first.length >= close.length && first.endsWith(close)) {
    tex = first.slice(0, -close.length);
  } else if (first.includes(close)) {
    return false;   // "$$x$$ and more": inline math inside a paragraph
  } else {
    const lines = [first];
    for (next = startLine + 1; next < endLine; next++) {
      pos = state.bMarks[next] + state.tShift[next];
      max = state.eMarks[next];
      if (pos < max && state.sCount[next] < state.blkIndent) return false;
      const l = src.slice(pos, max).trimEnd();
      if (l.endsWith(close)) { lines.push(l.slice(0, -close.length)); tex = lines.join('\n'); break; }
      lines.push(l);
    }
  }
  if (tex === null || !tex.trim()) return false;   // not closed (yet, while streaming): text
  if (silent) return true;
  state.line = next + 1;
  const t = state.push('math_block', 'math', 0);
  t.block = true;
  t.content = tex;
  t.markup = open;
  t.map = [startLine, state.line];
  return true;
}

// ---- sanitising ----

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

const PURIFY = { ADD_TAGS: ['semantics', 'annotation'], ADD_ATTR: ['target'],
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'img', 'iframe', 'object', 'embed'] };

const cache = new Map();

/** Markdown (untrusted) → sanitised HTML string. keep: cache it (a stored message, drawn again
 * at each redraw; not the growing text of a streamed answer). */
export function renderMarkdown(text, keep = true) {
  const hit = cache.get(text);
  if (hit !== undefined) return hit;
  let html;
  try {
    html = DOMPurify.sanitize(md.render(text), PURIFY);
  } catch (e) {
    html = '<p>' + escapeHtml(text) + '</p>';
  }
  if (keep && text.length > 64) {
    if (cache.size > 300) cache.clear();
    cache.set(text, html);
  }
  return html;
}

/** Set el's content to the rendered Markdown of text, with code-block tools. */
export function renderInto(el, text, keep = true) {
  el.innerHTML = renderMarkdown(text, keep);
  enhanceCode(el);
}

// ---- code blocks: language label + copy button ----

export function enhanceCode(root) {
  for (const pre of root.querySelectorAll('pre')) {
    if (pre.parentElement && pre.parentElement.classList.contains('codeblock')) continue;
    const code = pre.querySelector('code');
    const wrap = document.createElement('div');
    wrap.className = 'codeblock';
    const bar = document.createElement('div');
    bar.className = 'codebar';
    const lang = document.createElement('span');
    const m = code && /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
    lang.textContent = m ? m[1] : 'text';
    const btn = document.createElement('button');
    btn.type = 'button';
    btn.className = 'copy-code';
    btn.textContent = 'Copy';
    btn.setAttribute('aria-label', 'Copy this code block');
    btn.addEventListener('click', async () => {
      const ok = await copyText((code || pre).textContent);
      btn.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(() => { btn.textContent = 'Copy'; }, 1500);
    });
    bar.append(lang, btn);
    pre.replaceWith(wrap);
    wrap.append(bar, pre);
  }
}

/** Copy text: the Clipboard API where the page is a secure context (localhost, https), else
 * the older execCommand path (a box at http://box:8080 is not a secure context). */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try { await navigator.clipboard.writeText(text); return true; } catch (e) { /* fall through */ }
  }
  const had = document.activeElement;
  const ta = document.createElement('textarea');
  ta.value = text;
  ta.setAttribute('readonly', '');
  ta.className = 'offscreen';
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
  ta.remove();
  if (had && had.focus) had.focus();
  return ok;
}
