#!/usr/bin/env python3
# structured_test.py — structured output through a real `ember serve`:
#  - JSON Schema (nested objects, arrays with item schemas and bounds,
#    enums, const, number and integer bounds, optional members, patterns,
#    string lengths, formats, anyOf, $ref recursion) through
#    response_format json_schema: at temperature 1 over many seeds every
#    output that ends with finish_reason "stop" parses and validates
#    (Debian's python3-jsonschema); one cut by max_tokens says "length";
#  - response_format json_object, ember's "grammar" (GBNF) and "regex";
#    streamed output equal to the plain one; n = 2 choices both valid;
#  - bad input named before anything runs: a GBNF error with line and
#    column, an unsupported schema keyword, two structures at once;
#  - `ember run --json-schema` / `--grammar-file`: the continuation after the
#    prompt validates, it stops once complete; a bad grammar file is exit 2
#    with file, line and column;
#  - the chat model through the official openai SDK (strict json_schema).
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import skip, EMBER, Server, chat_model, shared_model  # noqa: E402

SCHEMAS = {
    'person': {'type': 'object', 'properties': {
        'name': {'type': 'string', 'minLength': 1, 'maxLength': 12},
        'age': {'type': 'integer', 'minimum': 0, 'maximum': 120},
        'email': {'type': 'string', 'pattern': '^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$'},
        'nick': {'type': 'string', 'maxLength': 6}},
        'required': ['name', 'age', 'email'], 'additionalProperties': False},
    'order': {'type': 'object', 'properties': {
        'id': {'type': 'string', 'format': 'uuid'},
        'items': {'type': 'array', 'minItems': 1, 'maxItems': 3, 'items': {
            'type': 'object', 'properties': {
                'sku': {'enum': ['A1', 'B2', 'C3']},
                'qty': {'type': 'integer', 'minimum': 1, 'maximum': 9},
                'price': {'type': 'number', 'minimum': 0, 'maximum': 1000}},
            'required': ['sku', 'qty'], 'additionalProperties': False}},
        'status': {'const': 'open'},
        'date': {'type': 'string', 'format': 'date'}},
        'required': ['id', 'items', 'status'], 'additionalProperties': False},
    'choice': {'anyOf': [{'type': 'boolean'}, {'type': 'null'},
                         {'type': 'object', 'properties': {'v': {'type': 'integer', 'minimum': -5, 'maximum': 5}},
                          'required': ['v'], 'additionalProperties': False}]},
    'tree': {'$ref': '#/$defs/node', '$defs': {'node': {'type': 'object', 'properties': {
        'k': {'enum': ['x', 'y']},
        'kids': {'type': 'array', 'maxItems': 2, 'items': {'$ref': '#/$defs/node'}}},
        'required': ['k'], 'additionalProperties': False}}},
}

stories = shared_model('stories260K.gguf')
srv = Server(stories, '--parallel', '4')
try:
    def comp(expect=200, **body):
        return srv.complete(expect, **dict({'prompt': 'Once upon a time'}, **body))

    def schema_format(name):
        return {'type': 'json_schema', 'json_schema': {'name': name, 'schema': SCHEMAS[name], 'strict': True}}

    counts = {}
    for name, schema in SCHEMAS.items():
        stops = 0
        for seed in range(10):
            r = comp(max_tokens=400, temperature=1.0, seed=seed, response_format=schema_format(name))
            ch = r['choices'][0]
            if ch['finish_reason'] == 'stop':
                doc = json.loads(ch['text'])
                jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())
                stops += 1
            else:
                assert ch['finish_reason'] == 'length' and r['usage']['completion_tokens'] == 400, r
        assert stops >= 7, (name, stops)
        counts[name] = stops
    # cut short: length, never a silently invalid document with stop
    r = comp(max_tokens=5, temperature=0, response_format=schema_format('order'))
    assert r['choices'][0]['finish_reason'] == 'length' and r['choices'][0]['text'].startswith('{'), r
    # json_object: any JSON object
    for seed in range(4):
        r = comp(max_tokens=300, temperature=1.0, seed=seed, response_format={'type': 'json_object'})
        if r['choices'][0]['finish_reason'] == 'stop':
            assert isinstance(json.loads(r['choices'][0]['text']), dict), r
    # GBNF and regex
    gbnf = 'root ::= greet " " name "!"\ngreet ::= "Hello" | "Hi"\nname ::= [A-Z] [a-z]{1,6}\n'
    for seed in range(5):
        t = comp(max_tokens=40, temperature=1.2, seed=seed, grammar=gbnf)['choices'][0]
        assert t['finish_reason'] == 'stop' and re.fullmatch(r'(Hello|Hi) [A-Z][a-z]{1,6}!', t['text']), t
        t = comp(max_tokens=40, temperature=1.2, seed=seed, regex='[0-9]{3}-[a-z]{2}(x|yz)?')['choices'][0]
        assert t['finish_reason'] == 'stop' and re.fullmatch(r'[0-9]{3}-[a-z]{2}(x|yz)?', t['text']), t
    # streamed: the same text as plain
    body = dict(max_tokens=200, temperature=1.0, seed=3, response_format=schema_format('person'))
    plain = comp(**body)['choices'][0]['text']
    st, _, raw = srv.request('POST', '/v1/completions', dict(body, prompt='Once upon a time', stream=True))
    assert st == 200, raw
    parts = [json.loads(ln[6:]) for ln in raw.decode().split('\n') if ln.startswith('data: {')]
    assert ''.join(p['choices'][0]['text'] for p in parts if p['choices']) == plain, (parts, plain)
    # n = 2: both choices follow the schema
    r = comp(max_tokens=300, temperature=1.0, seed=9, n=2, response_format=schema_format('choice'))
    for ch in r['choices']:
        if ch['finish_reason'] == 'stop':
            jsonschema.validate(json.loads(ch['text']), SCHEMAS['choice'])
    # bad input, named
    e = comp(400, grammar='root ::= "a" x\n')['error']
    assert e['param'] == 'grammar' and e['code'] == 'invalid_grammar' and 'grammar:1:' in e['message'] and \
        "'x'" in e['message'], e
    e = comp(400, response_format={'type': 'json_schema', 'json_schema': {
        'name': 'u', 'schema': {'type': 'array', 'uniqueItems': True}}})['error']
    assert e['param'] == 'response_format' and 'uniqueItems' in e['message'], e
    e = comp(400, response_format={'type': 'json_object'}, grammar='root ::= "a"')['error']
    assert e['param'] == 'response_format', e
    e = comp(400, response_format={'type': 'xml'})['error']
    assert e['code'] == 'unsupported_parameter', e
    e = comp(400, regex='(a')['error']
    assert e['param'] == 'regex', e
    print('structured (stories): valid documents of 10 seeds each: %s' % counts)
finally:
    rc, err = srv.stop()
assert rc == 0, err

# ---- ember run ----
tmp = tempfile.mkdtemp(prefix='ember-structured-')
sf, gf, bf = (os.path.join(tmp, n) for n in ('s.json', 'g.gbnf', 'bad.gbnf'))
with open(sf, 'w') as f:
    json.dump(SCHEMAS['person'], f)
with open(gf, 'w') as f:
    f.write('root ::= ("yes" | "no") "."\n')
with open(bf, 'w') as f:
    f.write('root ::= "a"\n  | b\n')
for seed in range(3):
    p = subprocess.run([EMBER, 'run', '--model', stories, '--json-schema', sf, '--temp', '1', '--seed', str(seed),
                        '-n', '400', '-p', 'Once'], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.startswith('Once'), (p.returncode, p.stderr)
    if 'stop: grammar complete' in p.stderr:
        jsonschema.validate(json.loads(p.stdout[len('Once'):]), SCHEMAS['person'],
                            format_checker=jsonschema.FormatChecker())
    else:
        assert 'stop: length' in p.stderr, p.stderr
p = subprocess.run([EMBER, 'run', '--model', stories, '--grammar-file', gf, '-p', 'Is it'], capture_output=True,
                   text=True, timeout=600)
assert p.returncode == 0 and re.fullmatch(r'Is it(yes|no)\.\n', p.stdout) and 'grammar complete' in p.stderr, p
p = subprocess.run([EMBER, 'run', '--model', stories, '--grammar-file', bf], capture_output=True, text=True,
                   timeout=600)
assert p.returncode == 2 and bf in p.stderr and 'grammar:2:' in p.stderr and p.stderr.count('\n') == 1, p.stderr

# ---- the chat model through the official SDK ----
try:
    import openai
except ImportError:
    skip('the rest (through the official openai SDK) needs the SDK: scripts/venv.sh puts it in .venv; '
         'what ran before it passed')
srv = Server(chat_model(), keys=[('sdk', ())])
try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['sdk'], max_retries=0, timeout=600)
    name = client.models.list().data[0].id
    schema = {'type': 'object', 'properties': {'city': {'type': 'string', 'maxLength': 20},
                                               'country': {'type': 'string', 'maxLength': 20},
                                               'population_millions': {'type': 'number', 'minimum': 0,
                                                                       'maximum': 100}},
              'required': ['city', 'country', 'population_millions'], 'additionalProperties': False}
    msgs = [{'role': 'user', 'content': 'Give the capital of France as JSON.'}]
    valid = 0
    for seed in range(3):
        r = client.chat.completions.create(model=name, messages=msgs, max_tokens=80, temperature=1.0, seed=seed,
                                           response_format={'type': 'json_schema', 'json_schema': {
                                               'name': 'capital', 'schema': schema, 'strict': True}})
        c = r.choices[0]
        if c.finish_reason == 'stop':
            jsonschema.validate(json.loads(c.message.content), schema)
            valid += 1
        else:
            assert c.finish_reason == 'length', c
    assert valid >= 2, valid
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=80, temperature=0,
                                       response_format={'type': 'json_object'})
    assert r.choices[0].finish_reason != 'stop' or isinstance(json.loads(r.choices[0].message.content), dict)
    print('structured (chat): %d of 3 valid, e.g. %s' % (valid, r.choices[0].message.content))
finally:
    rc, err = srv.stop()
assert rc == 0, err
