# ui_util.py — what the chat page's browser tests share: type and send a
# message, wait (bounded) for an answer to be filed, read what the page
# shows, set and read the settings dialog, check that no untrusted text ran
# or became an element, name every control, and screenshot the page at
# desktop and phone width in light and dark.
import json

from browser_util import By, Keys
from selenium.webdriver.support.ui import Select


def send_message(b, text):
    box = b.d.find_element(By.ID, 'input')
    box.click()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def wait_answer(b, n, timeout=240):
    """Wait until n answers are on screen and filed (each has its stored id, none is still
    streaming); the stats lines of those that have one (the model's)."""
    def filed(d):
        filed = d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id]')
        live = d.find_elements(By.CSS_SELECTOR, '#chat article.assistant:not([data-id])')
        busy = 'stop' in d.find_element(By.ID, 'send').get_attribute('class')
        metas = d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .meta')
        return len(filed) >= n and metas and not live and not busy and [m.text for m in metas]
    return b.wait(filed, '%d answers filed' % n, timeout=timeout)


def answers(b):
    return b.js("return [...document.querySelectorAll('#chat .msg.assistant .body')].map(e => e.textContent)")


def users(b):
    return b.js("return [...document.querySelectorAll('#chat .msg.user .body')].map(e => e.textContent)")


def get_conv(srv, cid, key=None):
    h = {'Authorization': 'Bearer ' + key} if key else {}
    st, _, body = srv.request('GET', '/api/conversations/%d' % cid, headers=h)
    assert st == 200, (st, body)
    return json.loads(body)


def conv_id(b):
    u = b.d.current_url
    assert '?c=' in u, u
    return int(u.split('?c=')[1])


FIELDS = ('system', 'temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed', 'priority')


def save_settings(b, **vals):
    b.d.find_element(By.ID, 'open-settings').click()
    b.wait(lambda d: d.find_element(By.ID, 'settings').is_displayed(), 'the settings dialog')
    for k, v in vals.items():
        e = b.d.find_element(By.ID, 's-' + k)
        if k == 'priority':
            Select(e).select_by_value(v)
        else:
            e.clear()
            e.send_keys(v)
    b.d.find_element(By.ID, 's-save').click()
    b.wait(lambda d: not d.find_element(By.ID, 'settings').is_displayed(), 'the settings saved')


def settings_values(b):
    b.d.find_element(By.ID, 'open-settings').click()
    b.wait(lambda d: d.find_element(By.ID, 'settings').is_displayed(), 'the settings dialog')
    got = {k: b.d.find_element(By.ID, 's-' + k).get_attribute('value') for k in FIELDS}
    b.d.find_element(By.ID, 's-cancel').click()
    b.wait(lambda d: not d.find_element(By.ID, 'settings').is_displayed(), 'the settings closed')
    return got


def assert_no_pwn(b):
    """No script from text ran, and no element of it exists."""
    assert b.js('return typeof window.__pwned') == 'undefined', 'a script from untrusted text ran'
    bad = b.js("""return [...document.querySelectorAll(
        '#chat .msg img, #chat script, #chat iframe, #convs img, #convs script, #title *, #chat [onerror], ' +
        '#chat a[href^="javascript"], #convs [onerror]')].map(e => e.outerHTML)""")
    assert not bad, 'elements from untrusted text: %s' % bad[:5]


def accessible_names(b):
    """Controls (buttons, links, fields) with no accessible name: their HTML."""
    return b.js("""
      const out = [];
      for (const e of document.querySelectorAll('button, a[href], input, textarea, select, summary')) {
        let name = e.getAttribute('aria-label') || e.getAttribute('title') || e.textContent.trim();
        if (!name && e.labels && e.labels.length) name = [...e.labels].map(l => l.textContent.trim()).join(' ');
        if (!name && e.placeholder) name = e.placeholder;
        if (!name) out.push(e.outerHTML.slice(0, 160));
      }
      return out;""")


def dark(b, on):
    b.d.execute_cdp_cmd('Emulation.setEmulatedMedia', {
        'features': [{'name': 'prefers-color-scheme', 'value': 'dark' if on else 'light'}]})


def screenshots(b, name):
    """Desktop (1280) and phone (375) width, light and dark: the paths."""
    paths = []
    for w, h, tag in ((1280, 900, 'desktop'), (375, 812, 'phone')):
        b.size(w, h)
        b.js("const c = document.getElementById('chat'); c.scrollTop = c.scrollHeight;")
        for mode in ('light', 'dark'):
            dark(b, mode == 'dark')
            b.js('return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))')
            paths.append(b.screenshot('%s-%s%s' % (name, tag, '' if mode == 'light' else '-dark')))
    dark(b, False)
    b.size(1280, 900)
    return paths
