#!/usr/bin/env python3
# ui_encoder_test.py — the chat page in a real headless Chromium against a
# real `ember serve` of an encoder (all-MiniLM-L6-v2): the model's name
# comes from `ready`, no chat box is shown (the compose area hidden, the
# input not displayed), the welcome offers no help with chat, and a note in
# the chat box's place names the model and the routes it serves; nothing leaves 127.0.0.1, the console logs no error;
# screenshotted at desktop width (artifacts under the build folder).
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402
from browser_util import Browser, By  # noqa: E402

model = shared_model('all-MiniLM-L6-v2-F16.gguf')
srv = Server(model)
b = None
try:
    b = Browser()
    b.get(srv.base + '/')
    b.wait(lambda d: 'MiniLM' in d.find_element(By.ID, 'model').text, 'the model name from ready')
    b.wait(lambda d: d.find_element(By.ID, 'no-chat').is_displayed(), 'the note in place of the chat box')
    note = b.d.find_element(By.ID, 'no-chat').text
    assert 'does not generate text' in note and '/v1/embeddings' in note and 'MiniLM' in note, note
    assert not b.d.find_element(By.ID, 'compose').is_displayed(), 'the compose area is shown'
    head = b.d.find_element(By.CSS_SELECTOR, '.welcome h2').text
    assert head == 'Embeddings and rerank', head
    assert not b.d.find_element(By.ID, 'input').is_displayed(), 'the chat input is shown'
    n = b.assert_local_only(srv.port)
    b.assert_no_console_errors()
    shot = b.screenshot('encoder-desktop')
    print('ui-encoder: note %r; %d requests, all to 127.0.0.1:%d; %s' % (note[:60], n, srv.port, shot))
finally:
    if b:
        b.quit()
    rc, err = srv.stop()
assert rc == 0, err
print('ui-encoder: ok')
