#!/usr/bin/env python3
# ui_branch_test.py — the chat page's branches and conversation management
# in a real headless Chromium against a real `ember serve` (the chat model):
#  - regenerate an answer: a second version beside the first (< 2/2 >), the
#    server holds both as siblings and shows the new one;
#  - switch back (the arrows): the page shows the first answer again and
#    the server's current_leaf_id follows (PATCH);
#  - edit the first message and resend: a sibling of the edited message
#    with its own answer; continue on that branch;
#  - switch the first message back: the branch last seen under it returns;
#  - reload: the same conversation (its URL /?c=ID), with every branch;
#  - rename (also to a hostile title: text, never markup), search by title;
#  - export one and all (downloads), import the export back (the same tree
#    under new ids, opened), delete (gone from the list and from the server);
#  - screenshots of a branched conversation at 1280 and 375 px.
# No request leaves 127.0.0.1 and the console logs no error.
import asyncio
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, chat_model  # noqa: E402
from browser_util import Browser, By, Keys  # noqa: E402
import ws_util  # noqa: E402
from ui_util import (send_message, wait_answer, answers, users, get_conv, conv_id, save_settings,  # noqa: E402
                     assert_no_pwn, screenshots)

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'


def listed(b):
    return b.js("return [...document.querySelectorAll('#convs .ctitle')].map(e => e.textContent)")


def shown_ids(b, role):
    return [int(x) for x in b.js("return [...document.querySelectorAll('#chat .msg.%s')].map(e => e.dataset.id)"
                                 % role)]


def sib_pos(b, role, index=-1):
    arts = b.d.find_elements(By.CSS_SELECTOR, '#chat .msg.' + role)
    pos = arts[index].find_elements(By.CSS_SELECTOR, '.sib .pos')
    return pos[0].text if pos else None


def click_tool(b, role, cls, index=-1):
    art = b.d.find_elements(By.CSS_SELECTOR, '#chat .msg.' + role)[index]
    b.js('arguments[0].scrollIntoView({block: "center"})', art)
    art.find_element(By.CSS_SELECTOR, cls).click()


def server_leaf(srv, cid, want, what):
    """Wait (bounded) until the server's current_leaf_id is want."""
    for _ in range(200):
        c = get_conv(srv, cid)
        if c['current_leaf_id'] == want:
            return c
        time.sleep(0.05)
    raise AssertionError('%s: current_leaf_id %s, not %s' % (what, c['current_leaf_id'], want))


def wait_file(folder, suffix, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [f for f in os.listdir(folder) if f.endswith(suffix)]
        if done:
            return os.path.join(folder, done[0])
        time.sleep(0.1)
    raise AssertionError('no %s file in %s: %s' % (suffix, folder, os.listdir(folder)))


def shape(conv):
    """A conversation's tree, ids left out: (role, content, parent's index) by message, and the leaf's index."""
    idx = {m['id']: i for i, m in enumerate(conv['messages'])}
    return ([(m['role'], m['content'], idx.get(m['parent_id'])) for m in conv['messages']],
            idx[conv['current_leaf_id']])


async def stored(srv, text):
    ws, _ = await ws_util.connect(srv)
    f = await ws_util.chat(ws, 'z', messages=[{'role': 'user', 'content': text}], max_tokens=4, temperature=0)
    await ws.close()
    return f[-1]['conversation_id']


def run(b, srv):
    b.get(srv.base + '/')
    b.wait(lambda d: 'context' in d.find_element(By.ID, 'model').text, 'ready')
    save_settings(b, max_tokens='32', temperature='1', seed='1')

    # ---- a first exchange, then a regenerated answer ----
    send_message(b, 'Say hello to me in one short sentence.')
    wait_answer(b, 1)
    cid = conv_id(b)
    [u1] = shown_ids(b, 'user')
    [a1] = shown_ids(b, 'assistant')
    assert sib_pos(b, 'assistant') is None      # one version: no arrows
    save_settings(b, seed='2')
    click_tool(b, 'assistant', '.regen')
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant.live'), 'the new answer streaming')
    wait_answer(b, 1)
    [a2] = shown_ids(b, 'assistant')
    assert a2 != a1 and shown_ids(b, 'user') == [u1], (a1, a2)
    assert sib_pos(b, 'assistant') == '2/2', sib_pos(b, 'assistant')
    c = get_conv(srv, cid)
    kids = [m['id'] for m in c['messages'] if m['parent_id'] == u1]
    assert kids == [a1, a2] and c['current_leaf_id'] == a2, (kids, c['current_leaf_id'])
    second = answers(b)[-1]

    # ---- back to the first answer ----
    click_tool(b, 'assistant', '.sib .prev')
    b.wait(lambda d: shown_ids(b, 'assistant') == [a1], 'the first answer again')
    assert sib_pos(b, 'assistant') == '1/2'
    server_leaf(srv, cid, a1, 'after switching back')
    click_tool(b, 'assistant', '.sib .next')
    b.wait(lambda d: shown_ids(b, 'assistant') == [a2], 'the second answer again')
    assert answers(b)[-1] == second
    click_tool(b, 'assistant', '.sib .prev')
    b.wait(lambda d: shown_ids(b, 'assistant') == [a1], 'the first answer, once more')
    server_leaf(srv, cid, a1, 'switched back again')

    # ---- edit the first message and resend ----
    click_tool(b, 'user', '.edit')
    ed = b.wait(lambda d: d.find_element(By.CSS_SELECTOR, '#chat .msg.user .edit-box textarea'), 'the editor')
    ed.send_keys(Keys.CONTROL, 'a')
    ed.send_keys('Say goodbye to me in one short sentence.')
    ed.send_keys(Keys.ENTER)
    wait_answer(b, 1)
    [u2] = shown_ids(b, 'user')
    [a3] = shown_ids(b, 'assistant')
    assert u2 != u1 and users(b) == ['Say goodbye to me in one short sentence.'], users(b)
    assert sib_pos(b, 'user') == '2/2', sib_pos(b, 'user')
    c = get_conv(srv, cid)
    byid = {m['id']: m for m in c['messages']}
    assert byid[u2]['parent_id'] is None and byid[u1]['parent_id'] is None, byid[u2]
    assert byid[a3]['parent_id'] == u2 and c['current_leaf_id'] == a3, (byid[a3], c['current_leaf_id'])

    # ---- continue on the edited branch ----
    send_message(b, 'And say it once more, in French.')
    wait_answer(b, 2)
    u_ids, a_ids = shown_ids(b, 'user'), shown_ids(b, 'assistant')
    assert u_ids[0] == u2 and a_ids[0] == a3 and len(u_ids) == 2 and len(a_ids) == 2, (u_ids, a_ids)
    a4 = a_ids[1]
    c = get_conv(srv, cid)
    assert {m['id']: m for m in c['messages']}[u_ids[1]]['parent_id'] == a3 and c['current_leaf_id'] == a4

    # ---- the first message back: its branch as last seen (the first answer) ----
    click_tool(b, 'user', '.sib .prev', index=0)
    b.wait(lambda d: shown_ids(b, 'user') == [u1] and shown_ids(b, 'assistant') == [a1], 'the first branch')
    assert sib_pos(b, 'user') == '1/2' and sib_pos(b, 'assistant') == '1/2'
    server_leaf(srv, cid, a1, 'the first branch')

    # ---- reload: the same conversation, every branch ----
    b.d.refresh()
    b.wait(lambda d: shown_ids(b, 'assistant') == [a1], 'the conversation after a reload')
    assert conv_id(b) == cid and shown_ids(b, 'user') == [u1]
    assert sib_pos(b, 'user') == '1/2' and sib_pos(b, 'assistant') == '1/2'
    click_tool(b, 'user', '.sib .next', index=0)
    b.wait(lambda d: shown_ids(b, 'assistant') == [a3, a4], 'the edited branch, after a reload')
    server_leaf(srv, cid, a4, 'the edited branch')
    shots = screenshots(b, 'chat-branches')

    # ---- rename, a hostile title too ----
    b.d.find_element(By.ID, 'rename').click()
    box = b.wait(lambda d: d.find_element(By.ID, 'rename-input'), 'the rename dialog')
    box.send_keys(Keys.CONTROL, 'a')
    box.send_keys('Greetings, branched')
    box.send_keys(Keys.ENTER)
    b.wait(lambda d: d.find_element(By.ID, 'title').text == 'Greetings, branched', 'the new title')
    b.wait(lambda d: 'Greetings, branched' in listed(b),
           'the new title in the list')
    assert get_conv(srv, cid)['title'] == 'Greetings, branched'
    b.d.find_element(By.ID, 'rename').click()
    box = b.wait(lambda d: d.find_element(By.ID, 'rename-input'), 'the rename dialog')
    box.send_keys(Keys.CONTROL, 'a')
    box.send_keys(HOSTILE)
    box.send_keys(Keys.ENTER)
    b.wait(lambda d: d.find_element(By.ID, 'title').text == HOSTILE, 'the hostile title, as text')
    b.wait(lambda d: HOSTILE in listed(b),
           'the hostile title in the list, as text')
    assert get_conv(srv, cid)['title'] == HOSTILE
    b.d.refresh()
    b.wait(lambda d: d.find_element(By.ID, 'title').text == HOSTILE, 'the hostile title after a reload')
    assert_no_pwn(b)
    assert b.js('return document.title').startswith(HOSTILE)

    # ---- search by title ----
    other = asyncio.run(stored(srv, 'Zebra facts for a school report'))
    b.d.refresh()
    b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#convs a')) == 2, 'both conversations listed')
    s = b.d.find_element(By.ID, 'search')
    s.send_keys('ZEBRA')
    b.wait(lambda d: listed(b) == ['Zebra facts for a school report'], 'the search result')
    s.send_keys(' nothing like it')
    b.wait(lambda d: d.find_element(By.ID, 'convs-empty').is_displayed(), 'no match, said so')
    assert 'No conversation matches' in b.d.find_element(By.ID, 'convs-empty').text
    s.send_keys(Keys.CONTROL, 'a')
    s.send_keys(Keys.BACKSPACE)
    b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#convs a')) == 2, 'the whole list again')

    # ---- export one, export all, import ----
    dl = tempfile.mkdtemp(prefix='ember-ui-dl-')
    b.d.execute_cdp_cmd('Browser.setDownloadBehavior', {'behavior': 'allow', 'downloadPath': dl})
    b.d.find_element(By.ID, 'export-one').click()
    one_path = wait_file(dl, '.json')
    one = json.load(open(one_path))
    assert os.path.basename(one_path).startswith('ember-conversation-%d' % cid), one_path
    assert one['ember_conversations'] == 1 and len(one['conversations']) == 1, one
    assert len(one['conversations'][0]['messages']) == 7, one['conversations'][0]['messages']
    os.rename(one_path, os.path.join(dl, 'one.export'))
    b.d.find_element(By.ID, 'export-all').click()
    all_path = wait_file(dl, '.json')
    assert len(json.load(open(all_path))['conversations']) == 2
    b.d.find_element(By.ID, 'import-file').send_keys(os.path.join(dl, 'one.export'))
    b.wait(lambda d: '?c=' in d.current_url and conv_id(b) not in (cid, other), 'the imported conversation opened')
    new = conv_id(b)
    b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#convs a')) == 3, 'three conversations listed')
    assert shape(get_conv(srv, new)) == shape(get_conv(srv, cid)), 'the import is not the same tree'
    nc = get_conv(srv, new)
    nb = {m['id']: m for m in nc['messages']}
    path, x = [], nc['current_leaf_id']
    while x:
        path.insert(0, x)
        x = nb[x]['parent_id']
    b.wait(lambda d: shown_ids(b, 'user') + shown_ids(b, 'assistant') ==
           [i for i in path if nb[i]['role'] == 'user'] + [i for i in path if nb[i]['role'] == 'assistant'],
           'the imported branch shown')

    # ---- delete: gone from the list and from the server ----
    b.d.find_element(By.ID, 'delete').click()
    b.wait(lambda d: d.find_element(By.ID, 'confirmdlg').is_displayed(), 'the confirmation')
    assert HOSTILE in b.d.find_element(By.ID, 'confirm-text').text
    b.d.find_element(By.ID, 'confirm-yes').click()
    b.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#convs a')) == 2, 'two conversations left')
    assert '?c=' not in b.d.current_url, b.d.current_url
    st, _, body = srv.request('GET', '/api/conversations/%d' % new)
    assert st == 404 and json.loads(body)['error']['code'] == 'not_found', (st, body)
    b.d.get(srv.base + '/?c=%d' % new)     # a bookmark of the deleted one: said so, a new chat
    b.wait(lambda d: 'does not exist' in d.find_element(By.ID, 'status').text, 'the deleted one, said so')
    assert '?c=' not in b.d.current_url
    assert_no_pwn(b)
    return shots


model = chat_model()
srv = Server(model)
b = None
try:
    b = Browser()
    shots = run(b, srv)
    n = b.assert_local_only(srv.port)
    b.assert_no_console_errors()
    print('ui-branch: %d requests, all to 127.0.0.1; screenshots: %s' % (n, ' '.join(shots)))
finally:
    if b:
        b.quit()
    rc, err = srv.stop()
assert rc == 0, err
print('ui-branch: ok')
