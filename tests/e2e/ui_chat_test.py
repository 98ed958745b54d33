#!/usr/bin/env python3
# ui_chat_test.py — the chat page in a real headless Chromium against a real
# `ember serve` (the chat model, SmolLM2), as a user drives it:
#  - settings (system prompt, sampling, class) kept across a reload, and sent;
#  - a message streams in (the text grows across three observations), the
#    status strip says where the request is, the stats line comes under it;
#  - a long story stopped mid-stream with Esc (finish reason `cancelled`);
#  - untrusted text: a stored answer, a title (the first message, then a
#    rename) carrying <img onerror>, <script> and javascript: links shows as
#    text, no element of theirs exists, no script ran (window.__pwned);
#  - math ($…$, $$…$$) typeset by KaTeX, code blocks left alone and given a
#    copy button; a long paste and an attached file become chips and travel
#    as fenced blocks headed by the file name;
#  - every control has an accessible name; screenshots at 1280 and 375 px,
#    light and dark (EMBER_ARTIFACTS);
#  - the connection lost mid-answer (the socket dropped; the server killed):
#    the answer is marked cut off (the stored one too), the page says so and
#    reconnects (backoff), to the new server;
# and, with --require-key (stories260K), the key prompt: a wrong key refused
# with a clear message, the right one accepted and kept, a revoked one refused.
# No request leaves 127.0.0.1; the console logs no error (but the failed
# reconnects while the server is down).
# Branches, rename, search, export/import: ui_branch_test.py.
import asyncio
import os
import signal
import sys
import tempfile

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, chat_model, shared_model, EMBER  # noqa: E402
from browser_util import Browser, By, Keys, until_text_grows  # noqa: E402
import ws_util  # noqa: E402
from ui_util import (send_message, wait_answer, answers, get_conv,  # noqa: E402
                     save_settings, settings_values, assert_no_pwn, screenshots, accessible_names)

HOSTILE_IMG = '<img src=x onerror="window.__pwned=1">'
HOSTILE_SCRIPT = '<script>window.__pwned=1</script>'
HOSTILE_LINK = '[press me](javascript:window.__pwned=1)'


async def stored_conversation(srv, messages, max_tokens=8):
    """A conversation stored through the WebSocket (`messages` with earlier turns): its id."""
    ws, _ = await ws_util.connect(srv)
    frames = await ws_util.chat(ws, 'x', messages=messages, max_tokens=max_tokens, temperature=0)
    await ws.close()
    d = frames[-1]
    assert d['type'] == 'done' and d['conversation_id'], frames[-3:]
    return d['conversation_id']


def main_server(b, srv):
    b.get(srv.base + '/')
    b.wait(lambda d: 'context' in d.find_element(By.ID, 'model').text, 'the model line from ready')
    line = b.d.find_element(By.ID, 'model').text
    assert 'SmolLM2' in line and 'context' in line and ' · ' in line, line   # model · device · context
    b.screenshot('chat-empty-desktop')

    # ---- settings, kept across a reload ----
    save_settings(b, system='You are a helpful assistant who tells long stories.', temperature='0.7',
                  top_p='0.95', top_k='40', min_p='0.05', max_tokens='900', seed='7', priority='interactive')
    b.get(srv.base + '/')
    b.wait(lambda d: 'context' in d.find_element(By.ID, 'model').text, 'ready after the reload')
    got = settings_values(b)
    assert got == {'system': 'You are a helpful assistant who tells long stories.', 'temperature': '0.7',
                   'top_p': '0.95', 'top_k': '40', 'min_p': '0.05', 'max_tokens': '900', 'seed': '7',
                   'priority': 'interactive'}, got

    # ---- a long story, streamed, then stopped with Esc ----
    send_message(b, 'Tell me a long story about a dragon who learns to bake bread.')
    seen_status = b.wait(lambda d: d.find_element(By.ID, 'status').text, 'the status strip while generating')
    grew = until_text_grows(b, '.msg.assistant.live .body', observations=3)
    b.wait(lambda d: 'tok/s' in d.find_element(By.ID, 'status').text, 'live tokens/s in the status strip')
    b.d.find_element(By.ID, 'input').send_keys(Keys.ESCAPE)
    meta = wait_answer(b, 1)
    assert 'stopped' in meta[-1] and 'tokens' in meta[-1] and 'first token' in meta[-1], meta
    cid = int(b.d.current_url.split('?c=')[1])
    conv = get_conv(srv, cid)
    roles = [m['role'] for m in conv['messages']]
    assert roles == ['system', 'user', 'assistant'], roles      # the system prompt went first
    assert conv['messages'][0]['content'].startswith('You are a helpful assistant'), conv['messages'][0]
    ans = conv['messages'][2]
    assert ans.get('finish_reason', 'cancelled') == 'cancelled' and 0 < ans['tokens'] < 900, ans
    shown = answers(b)[-1]
    assert shown and ans['content'].startswith(shown[:40].split('\n')[0][:20]), (shown[:80], ans['content'][:80])
    print('ui-chat: streamed %s chars; status %r; stopped: %s' % (grew, seen_status, meta[-1]))

    # ---- a short answer in the same conversation: the stats line in full ----
    save_settings(b, max_tokens='60', temperature='0')
    send_message(b, 'Name three colours.')
    until_text_grows(b, '.msg.assistant.live .body', observations=3)
    meta = wait_answer(b, 2)
    assert 'tokens' in meta[-1] and 'tok/s' in meta[-1] and 'first token' in meta[-1], meta
    conv = get_conv(srv, cid)
    assert [m['role'] for m in conv['messages']] == ['system', 'user', 'assistant', 'user', 'assistant'], conv

    # ---- untrusted text: a stored answer and a title ----
    hostile = ('Here: ' + HOSTILE_IMG + ' and ' + HOSTILE_SCRIPT + ' and ' + HOSTILE_LINK +
               ' and <a href="javascript:window.__pwned=1">raw link</a>\n\n' + HOSTILE_IMG + '\n\n' + HOSTILE_SCRIPT)
    evil = asyncio.run(stored_conversation(srv, [
        {'role': 'user', 'content': HOSTILE_IMG + ' say it'},
        {'role': 'assistant', 'content': hostile},
        {'role': 'user', 'content': 'Repeat your last message exactly: ' + HOSTILE_SCRIPT}]))
    b.get(srv.base + '/?c=%d' % evil)
    b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id]')) >= 2, 'the hostile answer')
    texts = answers(b)
    assert HOSTILE_IMG in texts[0] and HOSTILE_SCRIPT in texts[0] and 'javascript:' in texts[0], texts[0]
    title = b.d.find_element(By.ID, 'title').text
    assert title.startswith(HOSTILE_IMG), title
    listed = [e.text for e in b.d.find_elements(By.CSS_SELECTOR, '#convs .ctitle')]
    assert any(t.startswith(HOSTILE_IMG) for t in listed), listed
    users = [e.text for e in b.d.find_elements(By.CSS_SELECTOR, '#chat .msg.user .body')]
    assert users[0].startswith(HOSTILE_IMG) and HOSTILE_SCRIPT in users[1], users
    # the model's own answer to it, streamed through the page
    send_message(b, 'Now say this back to me: ' + HOSTILE_IMG + ' ' + HOSTILE_SCRIPT)
    wait_answer(b, 3)
    assert_no_pwn(b)

    # ---- math and code ----
    mathy = ('Euler: $e^{i\\pi} + 1 = 0$, and the area:\n\n$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$\n\n'
             'Prices stay text: $5 and $10.\n\n'
             '```python\ndef area(x):\n    return "$x$ stays $$ as is"\n```\n\nInline `$y$` too.')
    mc = asyncio.run(stored_conversation(srv, [{'role': 'user', 'content': 'Show me some maths and code.'},
                                                {'role': 'assistant', 'content': mathy},
                                                {'role': 'user', 'content': 'Thanks! Explain the integral.'}],
                                         max_tokens=60))
    b.get(srv.base + '/?c=%d' % mc)
    b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id]')) >= 2, 'the maths answer')
    first = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant .body')
    kx = first.find_elements(By.CSS_SELECTOR, '.katex')
    assert len(kx) >= 2 and first.find_elements(By.CSS_SELECTOR, '.math-block .katex-display'), len(kx)
    code = first.find_element(By.CSS_SELECTOR, '.codeblock pre code').text
    assert '$x$ stays $$ as is' in code, code
    assert not first.find_elements(By.CSS_SELECTOR, '.codeblock .katex, code .katex'), 'math inside code'
    assert first.find_element(By.CSS_SELECTOR, '.codeblock .codebar').text.startswith('python')
    assert '$5 and $10' in first.text and '$y$' in first.text, first.text
    b.js('document.getElementById("chat").scrollTop = 0')
    math_shot = b.screenshot('chat-math-desktop')
    copy = first.find_element(By.CSS_SELECTOR, '.codeblock .copy-code')
    copy.click()
    b.wait(lambda d: copy.text in ('Copied', 'Copy failed'), 'the copy button answers')
    assert copy.text == 'Copied', copy.text
    # the last answer streamed in this conversation: screenshots of a page with all of it
    send_message(b, 'Give me a Python example of a loop, in a code block.')
    wait_answer(b, 3)
    assert_no_pwn(b)
    global SHOTS
    SHOTS = [math_shot] + screenshots(b, 'chat')
    # the list as a drawer at phone width; Esc closes it
    b.size(375, 812)
    b.d.find_element(By.ID, 'open-side').click()
    b.wait(lambda d: d.find_element(By.ID, 'new-chat').is_displayed() and
           d.find_element(By.ID, 'sidebar').rect['x'] >= 0, 'the drawer open')
    b.js('return new Promise(r => setTimeout(r, 300))')      # the slide-in transition
    SHOTS.append(b.screenshot('chat-phone-list'))
    assert b.js('return document.activeElement.id') == 'search'
    b.d.find_element(By.ID, 'search').send_keys(Keys.ESCAPE)
    b.wait(lambda d: not d.find_element(By.ID, 'new-chat').is_displayed(), 'the drawer closed')
    b.size(1280, 900)

    # ---- attachments: an attached file and a long paste ----
    b.d.find_element(By.ID, 'new-chat').click()
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .welcome'), 'a new chat')
    tmp = tempfile.mkdtemp(prefix='ember-ui-')
    path = os.path.join(tmp, 'notes.txt')
    with open(path, 'w') as f:
        f.write('Shopping list:\n- flour\n- yeast\n```\nnot a fence end\n```\n')
    b.d.find_element(By.ID, 'attach-file').send_keys(path)
    b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#chips .chip')) == 1, 'the file chip')
    long = '\n'.join('line %d of the pasted log' % i for i in range(120))
    b.js("""const t = document.getElementById('input'); const dt = new DataTransfer();
            dt.setData('text/plain', arguments[0]); t.focus();
            t.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));""", long)
    b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#chips .chip')) == 2, 'the paste chip')
    chips = [e.text for e in b.d.find_elements(By.CSS_SELECTOR, '#chips .chip')]
    assert 'notes.txt' in chips[0] and 'pasted-1.txt' in chips[1] and '120 lines' in chips[1], chips
    assert b.d.find_element(By.ID, 'input').get_attribute('value') == '', 'the paste went into the box'
    send_message(b, 'What is on my shopping list?')
    wait_answer(b, 1)
    files = [e.text for e in b.d.find_elements(By.CSS_SELECTOR, '#chat .msg.user .file summary')]
    assert len(files) == 2 and 'notes.txt' in files[0] and 'pasted-1.txt' in files[1], files
    assert not b.d.find_elements(By.CSS_SELECTOR, '#chips .chip'), 'chips left after sending'
    ac = int(b.d.current_url.split('?c=')[1])
    content = get_conv(srv, ac)['messages'][1]['content']
    assert content.startswith('What is on my shopping list?\n\nFile: notes.txt\n````txt\nShopping list:'), content[:120]
    assert '\nFile: pasted-1.txt\n```txt\nline 0 of the pasted log' in content, content[-200:]

    # ---- every control can be named, and reached by Tab ----
    unnamed = accessible_names(b)
    assert not unnamed, 'controls without an accessible name: %s' % unnamed
    b.d.find_element(By.ID, 'input').click()
    b.d.find_element(By.ID, 'input').send_keys(Keys.TAB)
    assert b.js('return document.activeElement.id') == 'send', b.js('return document.activeElement.outerHTML')
    return cid


# the test's handle on the page's sockets (added by the browser before any script of the page)
SOCKETS = """(() => { const W = window.WebSocket; window.__sockets = [];
  window.WebSocket = function (...a) { const s = new W(...a); window.__sockets.push(s); return s; };
  window.WebSocket.prototype = W.prototype;
  Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 }); })();"""


def connection_lost(b, srv, model):
    """The socket drops mid-answer (the server lives on and keeps what was generated): the
    answer is marked cut off, stored as such. Then the server is killed mid-answer: the answer
    is marked cut off and the page reconnects to the next server on the same port. Returns the
    new server."""
    save_settings(b, max_tokens='900', temperature='0.8')
    b.d.find_element(By.ID, 'new-chat').click()
    send_message(b, 'Tell me a long story about a clockmaker.')
    until_text_grows(b, '.msg.assistant.live .body', observations=3)
    b.js('window.__sockets[window.__sockets.length - 1].close()')
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant.cutoff .cut-note'), 'the cut-off mark')
    # reconnected (1 s): the stored answer (cancelled when the socket went) carries the mark
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant.cutoff[data-id]'), 'the stored cut-off')
    cid = int(b.d.current_url.split('?c=')[1])
    aid = int(b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant.cutoff').get_attribute('data-id'))
    stored = {m['id']: m for m in get_conv(srv, cid)['messages']}[aid]
    assert stored.get('finish_reason', 'cancelled') == 'cancelled' and stored['tokens'] > 0, stored
    assert 'context' in b.d.find_element(By.ID, 'model').text

    b.d.find_element(By.ID, 'new-chat').click()
    send_message(b, 'Tell me a very long story about a lighthouse keeper.')
    until_text_grows(b, '.msg.assistant.live .body', observations=3)
    b.assert_no_console_errors()     # before the outage: nothing
    srv.p.send_signal(signal.SIGKILL)
    srv.p.wait(timeout=60)
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant.cutoff .cut-note'), 'the cut-off mark')
    b.wait(lambda d: 'Connection lost' in d.find_element(By.ID, 'status').text, 'the connection-lost notice')
    assert 'offline' in b.d.find_element(By.ID, 'model').text
    new = Server(model, '--port', str(srv.port), db=srv.db)
    assert new.port == srv.port
    b.wait(lambda d: 'context' in d.find_element(By.ID, 'model').text, 'the page reconnected', timeout=120)
    b.wait(lambda d: d.find_element(By.ID, 'status').is_displayed() is False or
           'Connection lost' not in d.find_element(By.ID, 'status').text, 'the notice gone')
    assert b.d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant.cutoff'), 'the cut-off answer vanished'
    b.logs()
    errs = [c for c in b.console if c[0] in ('SEVERE', 'ERROR')]
    others = [c for c in errs if 'WebSocket connection to' not in c[1] and 'ERR_CONNECTION_REFUSED' not in c[1]]
    assert not others, others
    b.console.clear()
    save_settings(b, max_tokens='60', temperature='0')
    send_message(b, 'Hello again.')
    wait_answer(b, 1)
    return new


def key_server(b):
    """--require-key: the page asks for a key, refuses a wrong one clearly, keeps the right one."""
    srv = Server(shared_model('stories260K.gguf'), '--require-key', keys=[('alice', ()), ('bob', ())])
    try:
        b.get(srv.base + '/')
        b.wait(lambda d: d.find_element(By.ID, 'keydlg').is_displayed(), 'the key prompt')
        k = b.d.find_element(By.ID, 'key-input')
        k.send_keys('em_thisisnotakeyatallreally')
        k.send_keys(Keys.ENTER)
        b.wait(lambda d: 'refused' in d.find_element(By.ID, 'key-error').text, 'the refusal')
        err = b.d.find_element(By.ID, 'key-error').text
        assert 'invalid_api_key' in err and 'wrong' in err, err
        assert b.d.find_element(By.ID, 'keydlg').is_displayed()
        b.screenshot('chat-key-refused')
        k = b.d.find_element(By.ID, 'key-input')
        k.clear()
        k.send_keys(srv.keys['alice'])
        k.send_keys(Keys.ENTER)
        b.wait(lambda d: not d.find_element(By.ID, 'keydlg').is_displayed(), 'the prompt closes')
        b.wait(lambda d: 'key alice' in d.find_element(By.ID, 'model').text, 'the key named in the header')
        save_settings(b, max_tokens='24', temperature='0')
        send_message(b, 'Once upon a time')
        wait_answer(b, 1)
        st, lst = ws_util.get_json(srv, '/api/conversations', srv.keys['alice'])
        assert st == 200 and len(lst['data']) == 1, lst
        # kept: a reload goes straight in, and the list is alice's
        b.get(srv.base + '/')
        b.wait(lambda d: 'key alice' in d.find_element(By.ID, 'model').text, 'in again after a reload')
        b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#convs a')) == 1, "alice's conversation")
        assert not b.d.find_element(By.ID, 'keydlg').is_displayed()
        # revoked: the next load is refused, and says so
        import subprocess
        lst = subprocess.run([EMBER, 'keys', 'list', '--db', srv.db], capture_output=True, text=True, check=True).stdout
        alice_id = [ln.split()[0] for ln in lst.splitlines() if 'alice' in ln][0]
        subprocess.run([EMBER, 'keys', 'revoke', alice_id, '--db', srv.db], capture_output=True, check=True)
        b.get(srv.base + '/')
        b.wait(lambda d: d.find_element(By.ID, 'keydlg').is_displayed(), 'the prompt again')
        b.wait(lambda d: 'revoked' in d.find_element(By.ID, 'key-error').text, 'revoked, said so')
        b.assert_local_only(srv.port)
        b.assert_no_console_errors()
    finally:
        rc, err = srv.stop()
    assert rc == 0, err


SHOTS = []
model = chat_model()
srv = Server(model)
b = None
try:
    b = Browser()
    b.d.execute_cdp_cmd('Page.addScriptToEvaluateOnNewDocument', {'source': SOCKETS})
    main_server(b, srv)
    n = b.assert_local_only(srv.port)
    b.assert_no_console_errors()
    srv = connection_lost(b, srv, model)
    n += b.assert_local_only(srv.port)
    b.assert_no_console_errors()
    b.logs()
    b.net.clear()
    key_server(b)
    print('ui-chat: %d requests, all to 127.0.0.1; screenshots: %s' % (n, ' '.join(SHOTS)))
finally:
    if b:
        b.quit()
    rc, err = srv.stop()
assert rc == 0, err
print('ui-chat: ok')
