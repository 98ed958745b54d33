// attach.js — text attachments. A file (or a long paste) travels inside the
// user message, after the typed text, as a fenced block headed by its name:
//
//     File: notes.txt
//     ```txt
//     …the file…
//     ```
//
// The fence is longer than any run of backticks in the file, so a file that
// holds Markdown fences cannot end the block early. split() finds those
// blocks again so that a stored message shows its files as files.

export const MAX_FILE_BYTES = 256 * 1024;       // the whole message must fit a WebSocket message (1 MiB)
export const PASTE_CHARS = 2000;                // a paste longer than this becomes an attachment
export const PASTE_LINES = 40;

function fenceFor(text) {
  let longest = 0;
  for (const m of text.matchAll(/`+/g)) longest = Math.max(longest, m[0].length);
  return '`'.repeat(Math.max(3, longest + 1));
}

function langFor(name) {
  const m = /\.([A-Za-z0-9+#-]{1,12})$/.exec(name);
  return m ? m[1].toLowerCase() : '';
}

export function cleanName(name) {
  return String(name).replace(/[\r\n`]/g, ' ').trim().slice(0, 120) || 'file.txt';
}

/** The message text: what was typed, then each attachment. */
export function compose(text, files) {
  const parts = [];
  if (text.trim()) parts.push(text.replace(/\s+$/, ''));
  for (const f of files) {
    const body = f.text.replace(/\n$/, '');
    const fence = fenceFor(body);
    parts.push('File: ' + cleanName(f.name) + '\n' + fence + langFor(f.name) + '\n' + body + '\n' + fence);
  }
  return parts.join('\n\n');
}

const BLOCK = /(^|\n)File: ([^\n`]{1,120})\n(`{3,})[A-Za-z0-9+#-]*\n([\s\S]*?)\n\3(?=\n|$)/g;

/** [{text}|{file, content}] in order: a message's typed text and its attachments. */
export function split(content) {
  const out = [];
  let last = 0;
  BLOCK.lastIndex = 0;
  for (let m; (m = BLOCK.exec(content));) {
    const at = m.index + m[1].length;
    const before = content.slice(last, at).replace(/\n+$/, '');
    if (before) out.push({ text: before });
    out.push({ file: m[2], content: m[4] });
    last = BLOCK.lastIndex;
  }
  const rest = content.slice(last).replace(/^\n+/, '');
  if (rest || !out.length) out.push({ text: rest });
  return out;
}

/** Read a File as text; reject what is too large or does not look like text. */
export async function readTextFile(file) {
  if (file.size > MAX_FILE_BYTES)
    throw new Error(file.name + ' is ' + Math.round(file.size / 1024) + ' KiB; files up to ' +
                    MAX_FILE_BYTES / 1024 + ' KiB can be attached');
  const text = await file.text();
  if (/\u0000/.test(text.slice(0, 8192)) || (text.match(/\uFFFD/g) || []).length > 8)
    throw new Error(file.name + ' does not look like a text file');
  return { name: cleanName(file.name), text };
}

export function describe(text) {
  const lines = text.split('\n').length;
  const kb = new Blob([text]).size / 1024;
  return lines + (lines === 1 ? ' line' : ' lines') + ' · ' + (kb < 10 ? kb.toFixed(1) : Math.round(kb)) + ' KiB';
}
