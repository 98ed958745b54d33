#!/usr/bin/env python3
# ui_reasoning_test.py — a model that thinks before it answers, on the chat
# page in a real headless Chromium: the real SmolLM2 with a chat template
# whose generation prompt opens a think block (as DeepSeek-R1's does; the
# server reads the tags off it), so that its output is reasoning. The page
# shows it folded above the answer, "Thinking…" while it comes and
# "Thought for N s" once filed, the text inside when unfolded, still there
# after a reload; the stored answer holds none of it. (The protocol beneath
# and the budget: reasoning_test.py.)
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
import serve_util as su  # noqa: E402
from browser_util import Browser, By  # noqa: E402
from ui_util import get_conv, save_settings, send_message  # noqa: E402



srv = su.Server(su.thinking_model(su.chat_model()))
b = None
try:
    b = Browser()
    b.get(srv.base + '/')
    b.wait(lambda d: d.find_element(By.ID, 'model').text.startswith('thinking'), 'the model name from ready')
    save_settings(b, max_tokens='40', temperature='0')
    send_message(b, 'Is 7 prime?')
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat article.assistant .thought summary'),
           'the reasoning box while it comes')
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought'),
           'the answer filed with its reasoning', timeout=300)
    summary = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought summary')
    assert summary.text.startswith('Thought for ') and summary.text.endswith(' s'), summary.text
    box = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought')
    assert box.get_attribute('open') is None   # folded
    text = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought-text')
    assert not text.is_displayed()
    summary.click()
    b.wait(lambda d: text.is_displayed() and len(text.text) > 10, 'the reasoning unfolded')
    answer = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] > .body').text
    assert answer == '' and text.text not in answer, (answer, text.text)
    b.screenshot('reasoning')
    # the stored answer is the answer alone (empty: it only thought)
    cid = int(b.d.current_url.split('?c=')[1])
    assert [m['content'] for m in get_conv(srv, cid)['messages'] if m['role'] == 'assistant'] == [''], cid
    # reloaded, the page still folds it (kept in this browser with the answer's timing)
    b.get(srv.base + '/?c=%d' % cid)
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought summary'),
           'the reasoning after a reload')
    b.assert_local_only(srv.port)
    b.assert_no_console_errors()
finally:
    if b:
        b.quit()
    srv.stop()
print('ui-reasoning: ok')
