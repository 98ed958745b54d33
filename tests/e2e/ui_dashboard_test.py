#!/usr/bin/env python3
# ui_dashboard_test.py — the usage dashboard (GET /dashboard) in a real
# headless Chromium against a real `ember serve --require-key` with the chat
# model: completions from two ordinary keys and an admin key, then
#  - without a key the page asks for one (the server said 401), and takes
#    the admin key through its form (kept as the chat page's ember.key);
#  - today's range (by hour): the per-key, per-class and per-hour tables
#    hold the same groups, requests and tokens as `ember usage --db <the
#    server's db> --format json` for the same range, and the shown text is
#    those numbers; every table's CSV download is the table;
#  - the admin picks one key and sees that key's usage only, then every key's;
#  - a range before the server ran shows no requests and no serving time,
#    and today's figures come back with today;
#  - the cost at the utilization measured is above the full-load one (the
#    box was mostly idle), both as /api/utilization says, and a price typed
#    with the keyboard scales the full-load cost with it;
#  - the diagnosis line names a case with its numbers, and the targets
#    typed into the page move it to "decode" and to "prompt";
#  - the live panel shows /metrics: KV blocks and running/queued counts, and a
#    running batch's progress line (gone once it is cancelled)
#    when idle, and 1 running + 1 queued while two long streams run on a
#    --parallel 1 server;
#  - an ordinary key's page shows its own usage only;
#  - no request left 127.0.0.1, the console logged no error (after the 401
#    the first step asked for), and screenshots at desktop and phone width,
#    light and dark, are saved as artifacts.
import csv
import datetime
import glob
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, chat_model  # noqa: E402
from browser_util import Browser, By, Keys  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

model = chat_model()
srv = Server(model, '--ctx', '512', '--parallel', '1', '--require-key',
             keys=[('alice', ()), ('bob', ()), ('root', ('--admin',))])
H = {name: {'Authorization': 'Bearer ' + k} for name, k in srv.keys.items()}
TODAY = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d')
b = None
socks = []


def cli(*args):
    r = subprocess.run([EMBER, 'usage', '--db', srv.db, '--format', 'json'] + list(args), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def loaded():
    return int(b.js('return Number(document.body.dataset.loaded || 0)'))


def polls():
    return int(b.js('return Number(document.body.dataset.polls || 0)'))


def show(since, until, period='auto', keyboard=False):
    """Set the range and press Show (or Enter on it); wait (bounded) for the load."""
    n = loaded()
    b.js("document.getElementById('since').value = arguments[0]; document.getElementById('until').value = arguments[1];"
         "document.getElementById('period').value = arguments[2];", since, until, period)
    btn = b.d.find_element(By.CSS_SELECTOR, '#controls button[type=submit]')
    if keyboard:
        btn.send_keys(Keys.ENTER)
    else:
        btn.click()
    b.wait(lambda d: loaded() > n, 'the dashboard to load %s..%s' % (since, until), timeout=120)


def rows(container, fields=False):
    """The table in #container: [header texts] (or field names), [[cell data-v...]...] (body + total),
    [[cell text...]]."""
    return b.js("""
        const t = document.querySelector('#' + arguments[0] + ' table');
        if (!t) return null;
        const cells = (r, f) => [...r.cells].map(f);
        return [cells(t.tHead.rows[0], c => arguments[1] ? c.dataset.v : c.textContent),
                [...t.tBodies[0].rows, ...(t.tFoot ? t.tFoot.rows : [])].map(r => cells(r, c => c.dataset.v)),
                [...t.tBodies[0].rows, ...(t.tFoot ? t.tFoot.rows : [])].map(r => cells(r, c => c.textContent))];
    """, container, fields)


def empty(container):
    return b.js("const e = document.querySelector('#' + arguments[0] + ' .empty'); return e ? e.textContent : null;",
                container)


def as_groups(container):
    """{group: {requests, prompt_tokens, cached_tokens, completion_tokens}} of a usage table (total included)."""
    head, vals, texts = rows(container)
    out = {}
    for v, t in zip(vals, texts):
        g = {}
        for k, label in (('requests', 'requests'), ('prompt_tokens', 'prompt tokens'), ('cached_tokens', 'cached tokens'),
                         ('completion_tokens', 'completion tokens')):
            i = head.index(label)
            g[k] = int(v[i])
            assert t[i].replace(',', '') == v[i], (container, label, t[i], v[i])   # the text is the number
        out[v[0]] = g
    return out


def cli_groups(rep):
    out = {g['group']: {k: g[k] for k in ('requests', 'prompt_tokens', 'cached_tokens', 'completion_tokens')}
           for g in rep['groups']}
    out['total'] = {k: rep['total'][k] for k in ('requests', 'prompt_tokens', 'cached_tokens', 'completion_tokens')}
    return out


def data_v(sel):
    v = b.js('const e = document.querySelector(arguments[0]); return e ? e.dataset.v : null;', sel)
    return float(v) if v not in (None, '') else None


def stream(key, prompt, tokens):
    """A streaming completion over a raw socket, left open (read nothing more): it runs until closed."""
    s = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
    req = json.dumps({'prompt': prompt, 'max_tokens': tokens, 'ignore_eos': True, 'stream': True}).encode()
    s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
              b'Authorization: Bearer ' + key.encode() + b'\r\nContent-Length: ' + str(len(req)).encode() +
              b'\r\n\r\n' + req)
    socks.append(s)
    return s


LIVE = {'live-run-i': 'ember_requests_running{class="interactive"}',
        'live-run-b': 'ember_requests_running{class="background"}',
        'live-queue-i': 'ember_requests_queued{class="interactive"}',
        'live-queue-b': 'ember_requests_queued{class="background"}',
        'live-kv-used': 'ember_kv_blocks{state="used"}', 'live-kv-cached': 'ember_kv_blocks{state="cached"}',
        'live-kv-free': 'ember_kv_blocks{state="free"}', 'live-kv-total': 'ember_kv_capacity_blocks'}


def live():
    return {k: data_v('#' + k) for k in LIVE}


def full_page(name, width):
    b.size(width, 900)
    h = b.js('return document.documentElement.scrollHeight')
    b.size(width, min(h + 140, 12000))   # the window's chrome
    time.sleep(0.3)
    return b.screenshot(name)


try:
    # ---- requests: alice twice, bob once, the admin once (one shares alice's prompt prefix) ----------
    long_prefix = 'You are a helpful assistant who answers in one short sentence. ' * 3
    for who, prompt, mt in (('alice', long_prefix + 'What is a cat?', 12), ('alice', long_prefix + 'What is a dog?', 8),
                            ('bob', 'Name a colour.', 10), ('root', 'Say hello.', 6)):
        st, h, body = srv.post('/v1/completions', {'prompt': prompt, 'max_tokens': mt, 'temperature': 0},
                               headers=H[who])
        assert st == 200, body
    ledger = srv.ledger_settled(4)
    assert len(ledger) == 4, ledger

    st, h, page = srv.request('GET', '/dashboard')
    assert st == 200 and h['content-type'].startswith('text/html') and b'/static/dashboard.js' in page, h
    assert "script-src 'self'" in h['content-security-policy'] and b'<script>' not in page, h
    for path in ('/static/dashboard.js', '/static/dashboard.css', '/static/vendor/chart.js'):
        st, h, body = srv.request('GET', path)
        assert st == 200 and len(body) > 1000, (path, st)

    b = Browser()
    dl = tempfile.mkdtemp(prefix='ember-dash-dl-')
    b.d.execute_cdp_cmd('Browser.setDownloadBehavior', {'behavior': 'allow', 'downloadPath': dl})

    # ---- no key: the page asks for one ---------------------------------------------------------------
    b.get(srv.base + '/dashboard')
    b.wait(lambda d: d.find_element(By.ID, 'keyform').is_displayed(), 'the key form after a 401')
    assert 'key' in b.d.find_element(By.ID, 'keymsg').text.lower()
    b.logs()
    b.console = [c for c in b.console if '401' not in c[1]]   # the 401 that made it ask, and only that
    n = loaded()
    box = b.d.find_element(By.ID, 'keyinput')
    box.send_keys(srv.keys['root'])
    box.send_keys(Keys.ENTER)
    b.wait(lambda d: loaded() > n, 'the first load with the admin key', timeout=120)
    assert b.js("return localStorage.getItem('ember.key')") == srv.keys['root']
    assert not b.d.find_element(By.ID, 'keyform').is_displayed()

    # ---- today's range, by hour: the tables against `ember usage` ----------------------------------------
    show(TODAY, TODAY)
    assert 'Every key' in b.d.find_element(By.ID, 'scope').text, b.d.find_element(By.ID, 'scope').text
    want_key = cli_groups(cli('--group-by', 'key', '--since', TODAY, '--until', TODAY))
    assert set(want_key) == {'alice', 'bob', 'root', 'total'}, want_key
    assert as_groups('table-key') == want_key, (as_groups('table-key'), want_key)
    want_class = cli_groups(cli('--group-by', 'class', '--since', TODAY, '--until', TODAY))
    assert as_groups('table-class') == want_class, (as_groups('table-class'), want_class)
    want_hour = cli_groups(cli('--group-by', 'hour', '--since', TODAY, '--until', TODAY))
    assert as_groups('table-volume') == want_hour, (as_groups('table-volume'), want_hour)
    assert want_key['total']['cached_tokens'] > 0, want_key   # alice's second prompt found her first's prefix
    # the latency and cached-share tables: the same periods, the CLI's percentiles
    rep_hour = cli('--group-by', 'hour', '--since', TODAY, '--until', TODAY)
    head, vals, texts = rows('table-latency')
    for g, v in zip(rep_hour['groups'] + [dict(rep_hour['total'], group='total')], vals):
        assert v[0] == g['group'], (v, g)
        for label, k in (('TTFT p50', 'ttft_p50_ms'), ('TTFT p99', 'ttft_p99_ms'), ('TPOT p99', 'tpot_p99_ms'),
                         ('queue p99', 'queue_p99_ms')):
            assert abs(float(v[head.index(label)]) - g[k]) < 1e-3, (label, v, g)
    head, vals, texts = rows('table-cached')
    assert abs(float(vals[-1][head.index('cached share')]) - rep_hour['total']['cached_share']) < 1e-6, vals

    # ---- every table's CSV is the table ----------------------------------------------------------------------
    for container in ('table-key', 'table-class', 'table-volume', 'table-latency', 'table-cached', 'table-util'):
        before = set(glob.glob(os.path.join(dl, '*.csv')))
        b.d.find_element(By.CSS_SELECTOR, '#%s button.csv' % container).click()
        deadline = time.monotonic() + 60
        while True:
            new = [p for p in set(glob.glob(os.path.join(dl, '*.csv'))) - before]
            if new and os.path.getsize(new[0]) > 0:
                break
            assert time.monotonic() < deadline, 'no CSV downloaded for ' + container
            time.sleep(0.1)
        with open(new[0], newline='') as f:
            text = f.read()
        assert text.endswith('\r\n'), text[-20:]
        got = list(csv.reader(io.StringIO(text)))
        head, vals, _ = rows(container, fields=True)
        assert got == [head] + vals, (container, got, [head] + vals)
        if container == 'table-key':   # the API's field names, the CLI's figures
            assert head[:6] == ['group', 'requests', 'prompt_tokens', 'cached_tokens', 'cached_share',
                                'completion_tokens'], head
        os.remove(new[0])

    # ---- the admin picks one key ----------------------------------------------------------------------------------
    assert b.d.find_element(By.ID, 'keypick').is_displayed()
    n = loaded()
    Select(b.d.find_element(By.ID, 'key')).select_by_value('bob')
    b.wait(lambda d: loaded() > n, 'the load of bob\'s usage')
    assert as_groups('table-key') == {'bob': want_key['bob'], 'total': want_key['bob']}, as_groups('table-key')
    assert 'Usage of key bob' in b.d.find_element(By.ID, 'scope').text
    n = loaded()
    Select(b.d.find_element(By.ID, 'key')).select_by_value('')
    b.wait(lambda d: loaded() > n, 'the load of every key\'s usage')
    assert as_groups('table-key') == want_key

    # ---- a range before the server ran: nothing; then today again -------------------------------------------
    show('2020-01-01', '2020-01-07')
    for container in ('table-key', 'table-class', 'table-volume', 'table-latency'):
        assert empty(container) and 'No requests' in empty(container), container
    assert 'no serving time' in empty('table-util'), empty('table-util')
    assert b.d.find_element(By.ID, 'diag-line').get_attribute('data-case') == 'none'
    assert data_v('#cost-full .big') is None and data_v('#cost-measured .big') is None
    show(TODAY, TODAY, keyboard=True)
    assert as_groups('table-key') == want_key

    # ---- cost: measured above full load, as /api/utilization says; the price scales it -------------------------
    def util():
        st, h, body = srv.request('GET', '/api/utilization?bucket=hour&since=%s&until=%s&gpu_cost_per_hour=2' %
                                  (TODAY, TODAY), headers=H['root'])
        assert st == 200, body
        return json.loads(body)['total']

    deadline = time.monotonic() + 120
    while util()['utilization'] >= 0.25:   # let the box idle: it was busy with the requests just now
        assert time.monotonic() < deadline, util()
        time.sleep(1)
    show(TODAY, TODAY)
    u = util()
    full, measured = data_v('#cost-full .big'), data_v('#cost-measured .big')
    assert full and measured and measured > full, (full, measured)
    assert abs(full - u['cost_per_1m_full_load']) <= 1e-6 * full, (full, u)   # busy time is still while idle
    assert u['utilization'] < 0.5 and measured > 2 * full, u   # mostly idle
    why = b.d.find_element(By.CSS_SELECTOR, '#cost-measured .why').text
    assert '%' in why and 'times the full-load price' in why, why
    assert 'tokens/s' in b.d.find_element(By.CSS_SELECTOR, '#cost-full .why').text
    price = b.d.find_element(By.ID, 'price')
    n = loaded()
    price.send_keys(Keys.CONTROL, 'a')
    price.send_keys('4')
    price.send_keys(Keys.TAB)
    b.wait(lambda d: loaded() > n, 'the costs at $4/h')
    assert abs(data_v('#cost-full .big') - 2 * full) <= 1e-5 * full, (data_v('#cost-full .big'), full)
    assert json.loads(b.js("return localStorage.getItem('ember.dashboard')"))['price'] == 4

    # ---- the diagnosis: a case and its numbers; the targets move it ------------------------------------------------
    line = b.d.find_element(By.ID, 'diag-line')
    assert line.get_attribute('data-case') in ('ok', 'prompt', 'decode', 'capacity'), line.get_attribute('data-case')
    assert ' ms' in line.text and 'p99' in line.text, line.text
    head, vals, texts = rows('table-latency')
    tpot99 = texts[-1][head.index('TPOT p99')]
    ttft99 = texts[-1][head.index('TTFT p99')]

    def target(field, value):
        el = b.d.find_element(By.ID, field)
        b.js("arguments[0].closest('details').open = true", el)
        el.send_keys(Keys.CONTROL, 'a')
        el.send_keys(str(value))
        el.send_keys(Keys.TAB)

    target('t-tpot', 0.001)
    b.wait(lambda d: line.get_attribute('data-case') == 'decode', 'the decode diagnosis')
    assert 'Decode is overloaded' in line.text and tpot99 in line.text, (line.text, tpot99)
    target('t-tpot', 100000)
    target('t-queue', 100000)
    target('t-ttft', 0.001)
    b.wait(lambda d: line.get_attribute('data-case') == 'prompt', 'the prompt diagnosis')
    assert 'prompt side' in line.text and ttft99 in line.text, (line.text, ttft99)
    assert all(v[-1] == 'prompt' for v in rows('table-latency')[1]), rows('table-latency')[1]   # each period
    target('t-ttft', 1000)
    target('t-tpot', 100)
    target('t-queue', 250)

    # ---- the live panel: /metrics when idle, and while two streams run on one slot --------------------------------
    p0 = polls()
    b.wait(lambda d: polls() > p0 + 1, 'two polls of /metrics', timeout=60)
    shown, m = live(), srv.metrics(H['root'])
    assert shown == {k: m[v] for k, v in LIVE.items()}, (shown, m)
    assert shown['live-kv-used'] == 0 and shown['live-kv-cached'] > 0, shown
    assert data_v('#live-tps') is not None and data_v('#live-busy') is not None
    stream(srv.keys['bob'], 'Tell me a long story about a dragon.', 400)   # not alice's: her figures stay
    stream(srv.keys['root'], 'Tell me a long story about a castle.', 400)

    def busy_panel(d):
        s = live()
        return s['live-run-i'] == 1 and s['live-queue-i'] == 1 and s['live-kv-used'] > 0

    b.wait(busy_panel, 'the live panel to show 1 running and 1 queued', timeout=120)
    m = srv.metrics(H['root'])
    assert m[LIVE['live-run-i']] == 1 and m[LIVE['live-queue-i']] == 1, m
    b.wait(lambda d: data_v('#live-tps') and data_v('#live-tps') > 0, 'tokens/s above 0', timeout=60)
    desk_busy = full_page('dashboard-desktop-busy', 1280)
    for s in socks:
        s.close()
    socks.clear()
    b.size(1280, 900)

    # ---- an ordinary key sees its own usage only ----------------------------------------------------------------------
    b.js("localStorage.setItem('ember.key', arguments[0])", srv.keys['alice'])
    n = loaded()
    b.get(srv.base + '/dashboard?since=%s&until=%s' % (TODAY, TODAY))
    b.wait(lambda d: loaded() >= 1, 'the load with alice\'s key', timeout=120)
    groups = as_groups('table-key')
    assert set(groups) == {'alice', 'total'}, groups
    assert groups['alice'] == want_key['alice'] and groups['total'] == want_key['alice'], (groups, want_key)
    assert "Your key's usage only" in b.d.find_element(By.ID, 'scope').text
    assert not b.d.find_element(By.ID, 'keypick').is_displayed()
    mine = [r for r in srv.ledger() if r['key_id'] == srv.ledger("SELECT id FROM api_keys WHERE name = 'alice'")[0]['id']]
    assert as_groups('table-volume')['total']['requests'] == len(mine) >= 2, mine

    # ---- the admin's page again, for the pictures; then the checks of the whole session ----------------------------------
    b.js("localStorage.setItem('ember.key', arguments[0])", srv.keys['root'])
    b.get(srv.base + '/dashboard?since=%s&until=%s' % (TODAY, TODAY))
    b.wait(lambda d: loaded() >= 1 and polls() >= 2, 'the admin page with two polls', timeout=120)
    desk = full_page('dashboard-desktop', 1280)
    phone = full_page('dashboard-phone', 375)
    wide = b.js('return document.documentElement.scrollWidth')
    assert wide <= 375, 'the page is %d px wide at 375' % wide
    b.size(1280, 900)
    b.d.find_element(By.CSS_SELECTOR, '.presets button[data-days="7"]').click()   # the default view: 7 days
    b.wait(lambda d: rows('table-volume') and len(rows('table-volume')[1][0][0]) == 10, 'the 7-day view by day')
    week = full_page('dashboard-desktop-7days', 1280)
    show(TODAY, TODAY)
    b.d.execute_cdp_cmd('Emulation.setEmulatedMedia', {'features': [{'name': 'prefers-color-scheme', 'value': 'dark'}]})
    time.sleep(0.5)
    dark = full_page('dashboard-phone-dark', 375)
    desk_dark = full_page('dashboard-desktop-dark', 1280)
    # ---- a running batch: its progress line in the live panel, gone once it is cancelled ---------------------------
    b.d.execute_cdp_cmd('Emulation.setEmulatedMedia', {'features': [{'name': 'prefers-color-scheme', 'value': 'light'}]})
    lines = b''.join(json.dumps({'custom_id': 'd%d' % i, 'method': 'POST', 'url': '/v1/completions',
                                 'body': {'prompt': 'Once upon a time %d' % i, 'max_tokens': 300, 'ignore_eos': True}}
                                ).encode() + b'\n' for i in range(30))
    bnd = 'dashBoundary'
    up = (b'--' + bnd.encode() + b'\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--' +
          bnd.encode() + b'\r\nContent-Disposition: form-data; name="file"; filename="d.jsonl"\r\n\r\n' + lines +
          b'\r\n--' + bnd.encode() + b'--\r\n')
    st, _, out = srv.request('POST', '/v1/files', raw=up, headers=dict(H['root'], **{
        'Content-Type': 'multipart/form-data; boundary=' + bnd}))
    assert st == 200, out
    st, _, bo = srv.post('/v1/batches', {'input_file_id': json.loads(out)['id'], 'endpoint': '/v1/completions',
                                         'completion_window': '24h'}, headers=H['root'])
    assert st == 200 and bo['status'] in ('validating', 'in_progress'), bo
    sel = '#live-batches li[data-batch="%s"]' % bo['id']
    b.wait(lambda d: b.js('const e = document.querySelector(arguments[0]); return e && e.dataset.total;', sel) == '30',
           'the batch in the live panel', timeout=60)
    li = b.d.find_element(By.CSS_SELECTOR, sel)
    assert bo['id'] in li.text and 'of 30 done' in li.text, li.text
    batch_shot = full_page('dashboard-desktop-batch', 1280)
    st, _, c = srv.post('/v1/batches/%s/cancel' % bo['id'], {}, headers=H['root'])
    assert st == 200, c
    b.wait(lambda d: not b.js('return document.querySelector(arguments[0]) !== null;', sel) and
           b.d.find_element(By.ID, 'live-batches').text == 'none', 'the cancelled batch gone from the panel',
           timeout=60)
    n_req = b.assert_local_only(srv.port)
    b.assert_no_console_errors()
    print('ui-dashboard: %d requests, all to 127.0.0.1:%d; %s' % (n_req, srv.port,
          ', '.join((desk, desk_busy, week, phone, dark, desk_dark, batch_shot))))
finally:
    for s in socks:
        s.close()
    if b:
        b.quit()
    rc, err = srv.stop()
assert rc == 0, err
print('ui-dashboard: ok')
