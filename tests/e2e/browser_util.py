# browser_util.py — a real Chromium for the UI tests: Debian's `chromium`
# and `chromium-driver`, headless, driven by Debian's python3-selenium, with
# the browser's network and console logs captured so that a test can
# assert that no request left 127.0.0.1 and that the page logged no error,
# and screenshots saved as test artifacts (EMBER_ARTIFACTS, default a
# folder under the build tree). SKIP (77) when Chromium or selenium is
# missing.
import json
import os
import shutil
import sys
import time
import urllib.parse

from serve_util import skip

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    skip('python3-selenium is not installed (scripts/setup.sh installs it)')

By, Keys  # re-exported for the tests

CHROMIUM = shutil.which('chromium') or '/usr/bin/chromium'
DRIVER = shutil.which('chromedriver') or '/usr/bin/chromedriver'
ARTIFACTS = os.environ.get('EMBER_ARTIFACTS', os.path.join(os.getcwd(), 'ui-artifacts'))


class Browser:
    def __init__(self, width=1280, height=900):
        if not os.path.exists(CHROMIUM) or not os.path.exists(DRIVER):
            skip('chromium or chromedriver is not installed (scripts/setup.sh installs them)')
        o = webdriver.ChromeOptions()
        o.binary_location = CHROMIUM
        for a in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
                  '--no-first-run', '--disable-background-networking', '--disable-component-update',
                  '--disable-default-apps', '--disable-sync', '--metrics-recording-only',
                  '--window-size=%d,%d' % (width, height)):
            o.add_argument(a)
        o.set_capability('goog:loggingPrefs', {'performance': 'ALL', 'browser': 'ALL'})
        self.d = webdriver.Chrome(service=Service(DRIVER), options=o)
        self.d.set_page_load_timeout(300)
        self.d.set_script_timeout(300)
        self.net = []        # every URL the page asked for
        self.console = []    # console messages (level, text)

    def size(self, width, height):
        self.d.set_window_size(width, height)

    def get(self, url):
        self.d.get(url)

    def wait(self, cond, what, timeout=240):
        """Wait (bounded) until cond(driver) is truthy; its value."""
        return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(cond, message='waiting for ' + what)

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def logs(self):
        """Collect the network and console logs gathered since the last call."""
        for e in self.d.get_log('performance'):
            m = json.loads(e['message'])['message']
            if m.get('method') == 'Network.requestWillBeSent':
                self.net.append(m['params']['request']['url'])
            elif m.get('method') == 'Network.webSocketCreated':
                self.net.append(m['params']['url'])
        for e in self.d.get_log('browser'):
            self.console.append((e['level'], e['message']))
        return self.net, self.console

    def assert_local_only(self, port):
        """No request went anywhere but this server on 127.0.0.1."""
        net, _ = self.logs()
        bad = []
        for u in net:
            p = urllib.parse.urlparse(u)
            if p.scheme in ('data', 'blob', 'about', 'chrome', 'devtools'):
                continue
            if p.hostname != '127.0.0.1' or p.port != port:
                bad.append(u)
        assert not bad, 'requests that left the server: %s' % bad[:10]
        return len(net)

    def assert_no_console_errors(self):
        _, console = self.logs()
        errs = [c for c in console if c[0] in ('SEVERE', 'ERROR')]
        assert not errs, 'console errors: %s' % errs[:10]

    def screenshot(self, name):
        os.makedirs(ARTIFACTS, exist_ok=True)
        path = os.path.join(ARTIFACTS, name + '.png')
        self.d.save_screenshot(path)
        return path

    def quit(self):
        try:
            self.d.quit()
        except Exception:   # the browser is gone already
            pass


def until_text_grows(b, selector, observations=3, timeout=120):
    """Watch an element's text grow: return the distinct lengths seen (at
    least `observations` of them, strictly increasing), bounded (under the
    test's own timeout, so that a text that stops growing fails here, saying
    so, instead of as a timeout)."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = b.js('const e = document.querySelector(arguments[0]); return e ? e.textContent : null;', selector)
        if t and (not seen or len(t) > seen[-1]):
            seen.append(len(t))
            if len(seen) >= observations:
                return seen
        time.sleep(0.02)
    raise AssertionError('the text of %s grew only %s' % (selector, seen))


__all__ = ['Browser', 'By', 'Keys', 'until_text_grows', 'ARTIFACTS', 'sys']
