#!/usr/bin/env python3
# ui_smoke_test.py — the embedded chat page in a real headless Chromium
# against a real `ember serve`: the page and its libraries load from the
# binary (ETag + 304 on a repeat), the model's name comes from `ready`, a
# typed message streams its answer in (the text grows across at least three
# observations; a long story, stopped with Esc) with the timings line under
# it, no request leaves 127.0.0.1, the console logs no error, and the page
# is screenshotted at desktop and phone width (artifacts under the build
# folder).
import json
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, chat_model  # noqa: E402
from browser_util import Browser, By, Keys, until_text_grows  # noqa: E402

model = chat_model()
srv = Server(model)
b = None
try:
    # the files themselves: content types, ETag, 304
    st, h, body = srv.request('GET', '/')
    assert st == 200 and h['content-type'].startswith('text/html') and b'<script type="module"' in body, h
    assert "script-src 'self'" in h['content-security-policy'], h
    st2, h2, body2 = srv.request('GET', '/', headers={'If-None-Match': h['etag']})
    assert st2 == 304 and not body2, (st2, body2[:100])
    for path, typ in (('/static/app.js', 'text/javascript'), ('/static/vendor/markdown-it.js', 'text/javascript'),
                      ('/static/vendor/katex.css', 'text/css'),
                      ('/static/vendor/fonts/KaTeX_Main-Regular.woff2', 'font/woff2')):
        st, h, body = srv.request('GET', path)
        assert st == 200 and h['content-type'].startswith(typ) and len(body) > 100, (path, st, h)
    st, h, body = srv.request('GET', '/static/nothing.js')
    assert st == 404 and json.loads(body)['error']['code'] == 'not_found'

    b = Browser()
    b.get(srv.base + '/')
    b.wait(lambda d: 'SmolLM2' in d.find_element(By.ID, 'model').text, 'the model name from ready')
    box = b.d.find_element(By.ID, 'input')
    box.send_keys('Tell me a story about a dragon who bakes bread.')   # long: it streams for seconds
    box.send_keys(Keys.ENTER)
    grew = until_text_grows(b, '#chat .msg.assistant.live .body', observations=3)
    b.d.find_element(By.ID, 'input').send_keys(Keys.ESCAPE)   # enough: stop it
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .meta'), 'the timings line')
    meta = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .meta').text
    assert 'tokens' in meta and 'tok/s' in meta and 'first token' in meta, meta
    n = b.assert_local_only(srv.port)
    b.assert_no_console_errors()
    desk = b.screenshot('smoke-desktop')
    b.size(375, 812)
    phone = b.screenshot('smoke-phone')
    print('ui-smoke: answer grew %s; %d requests, all to 127.0.0.1:%d; %s, %s' % (grew, n, srv.port, desk, phone))
finally:
    if b:
        b.quit()
    rc, err = srv.stop()
assert rc == 0, err
print('ui-smoke: ok')
