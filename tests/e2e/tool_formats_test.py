# tool_formats_test.py — the tool-call formats whose calls carry an id the
# model writes, read off Mistral's own templates (Small 3.2:
# [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}; Nemo: [TOOL_CALLS][{"name": ...,
# "arguments": {...}, "id": "..."}]), on the real SmolLM2 weights given each
# template and its markers as control tokens (three of SmolLM2's unused
# control tokens renamed), through a real `ember serve` and the official
# openai and anthropic SDKs:
#  - the server reads the format off the template and says the calls carry
#    an id; the control tokens the format writes come back as text;
#  - tool_choice required (plain and streamed) and auto (the model made to
#    write [TOOL_CALLS] by a logit bias on that one token): every call
#    validates against its schema and its id is the 9 letters and digits
#    the model wrote, which the template demands back on the next turn — a
#    round trip with the tool's result renders, a call_… id would not;
#  - the Anthropic door gives the same id as the tool_use id and takes it
#    back in a tool_result;
#  - harmony (gpt-oss's layout, a template written here, SmolLM2's control
#    tokens renamed to harmony's markers): the call is a message of its own
#    (`<|start|>assistant to=functions.NAME<|channel|>commentary
#    json<|message|>ARGS<|call|>`), plain and streamed, and its result
#    renders on the next turn.
import json
import os
import re
import tempfile

import serve_util as su

try:
    import anthropic
    import jsonschema
    import openai
except ImportError as e:
    su.skip('%s (scripts/setup.sh installs python3-jsonschema, scripts/venv.sh the SDKs)' % e)

BASE = su.chat_model()
TEMPLATES = os.path.join(su.SHARED, 'golden', 'templates')
MARKERS = {3: '[TOOL_CALLS]', 4: '[CALL_ID]', 5: '[ARGS]'}   # SmolLM2's <repo_name>, <reponame>, <file_sep>

WEATHER = {'type': 'object', 'properties': {
    'city': {'type': 'string', 'maxLength': 30},
    'days': {'type': 'integer', 'minimum': 1, 'maximum': 7}}, 'required': ['city', 'days'],
    'additionalProperties': False}
ZONE = {'type': 'object', 'properties': {'zone': {'enum': ['UTC', 'CET', 'JST']}}, 'required': ['zone'],
        'additionalProperties': False}
TOOLS = [{'type': 'function', 'function': {'name': 'get_weather', 'description': 'The forecast for a city',
                                           'parameters': WEATHER}},
         {'type': 'function', 'function': {'name': 'get_time', 'description': 'The time in a zone',
                                           'parameters': ZONE}}]
SCHEMAS = {'get_weather': WEATHER, 'get_time': ZONE}
ASK = [{'role': 'user', 'content': 'What will the weather be in Paris for the next 3 days?'}]


def valid(call):
    """A call with the model's own id (9 letters and digits) whose arguments validate."""
    assert re.fullmatch(r'[A-Za-z0-9]{9}', call.id), call
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return call.function.name


HARMONY = (
    "{%- set ns = namespace(last='') -%}{%- for m in messages -%}{%- if m.role == 'user' -%}"
    "<|start|>user<|message|>{{ m.content }}<|end|>{%- elif m.role == 'assistant' and m.tool_calls -%}"
    "{%- set c = m.tool_calls[0].function -%}{%- set ns.last = c.name -%}"
    "<|start|>assistant to=functions.{{ c.name }}<|channel|>commentary json<|message|>{{ c.arguments | tojson }}"
    "<|call|>{%- elif m.role == 'assistant' -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
    "{%- elif m.role == 'tool' -%}<|start|>functions.{{ ns.last }} to=assistant<|channel|>commentary<|message|>"
    "{{ m.content | tojson }}<|end|>{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}<|start|>assistant"
    "{%- endif -%}")
HARMONY_MARKERS = {3 + i: m for i, m in enumerate(['<|start|>', '<|channel|>', '<|message|>', '<|constrain|>',
                                                   '<|end|>', '<|return|>', '<|call|>'])}


def model(template_name, template=None, tokens=MARKERS):
    path = os.path.join(tempfile.mkdtemp(prefix='ember-toolfmt-'), 'format.gguf')
    if template is None:
        with open(os.path.join(TEMPLATES, template_name + '.jinja')) as f:
            template = f.read()
    su.gguf_with_template(BASE, path, template, tokens=tokens)
    return path


def round_trip(client, name, call):
    """The call and its result sent back: the template renders them (it refuses an id that is not 9
    letters and digits) and the model answers."""
    msgs = ASK + [{'role': 'assistant', 'content': None, 'tool_calls': [
        {'id': call.id, 'type': 'function', 'function': {'name': call.function.name,
                                                         'arguments': call.function.arguments}}]},
        {'role': 'tool', 'tool_call_id': call.id, 'content': '{"forecast": "sunny"}'}]
    r = client.chat.completions.create(model=name, messages=msgs, tools=TOOLS, tool_choice='none',
                                       temperature=0, max_tokens=8)
    assert r.choices[0].finish_reason in ('stop', 'length'), r
    return msgs


for tname in ('Mistral-Small-3.2-24B-Instruct-2506', 'mistralai-Mistral-Nemo-Instruct-2407'):
    srv = su.Server(model(tname))
    try:
        err = open(srv.err_path).read()
        assert 'tool calls: the template writes them as [TOOL_CALLS]' in err and "(with the call's id)" in err, \
            err[-2000:]
        client = openai.OpenAI(base_url=srv.base + '/v1', api_key='x', max_retries=0, timeout=600)
        name = client.models.list().data[0].id

        # required: the call, from the first token
        r = client.chat.completions.create(model=name, messages=ASK, tools=TOOLS, tool_choice='required',
                                           temperature=0, max_tokens=60, parallel_tool_calls=False)
        ch = r.choices[0]
        assert ch.finish_reason == 'tool_calls' and len(ch.message.tool_calls) == 1, ch
        call = ch.message.tool_calls[0]
        print('%s: required -> %s %s %s' % (tname, call.id, call.function.name, call.function.arguments))
        valid(call)
        msgs = round_trip(client, name, call)

        # a call_… id (not what the template takes) is the template's refusal, said as a 400
        bad = json.loads(json.dumps(msgs))
        bad[1]['tool_calls'][0]['id'] = bad[2]['tool_call_id'] = 'call_0123456789abcdef'
        try:
            client.chat.completions.create(model=name, messages=bad, max_tokens=4)
            raise AssertionError('a call id of the wrong length rendered')
        except openai.BadRequestError as e:
            assert 'length 9' in str(e), e

        # streamed: the SDK assembles the same call (id, name, arguments)
        with client.chat.completions.stream(model=name, messages=ASK, tools=TOOLS, tool_choice='required',
                                            temperature=0, max_tokens=60, parallel_tool_calls=False) as s:
            final = s.get_final_completion()
        sc = final.choices[0].message.tool_calls
        assert final.choices[0].finish_reason == 'tool_calls' and len(sc) == 1, final
        assert (sc[0].id, sc[0].function.name, sc[0].function.arguments) == \
            (call.id, call.function.name, call.function.arguments), (sc, call)

        # auto: free text until the model writes the [TOOL_CALLS] token (made to by a logit bias on it:
        # the tool has no strings, so the grammar allows it nowhere after), then the grammar's call
        r = client.chat.completions.create(model=name, messages=[{'role': 'user', 'content': 'What time is it?'}],
                                           tools=TOOLS[1:], temperature=0, max_tokens=40, logit_bias={'3': 100},
                                           parallel_tool_calls=False)
        ch = r.choices[0]
        assert ch.finish_reason == 'tool_calls' and [valid(c) for c in ch.message.tool_calls] == ['get_time'], ch
        assert '[TOOL_CALLS]' not in (ch.message.content or ''), ch.message
        print('%s: auto -> %s' % (tname, ch.message.tool_calls[0].function.arguments))
        # without tools the marker is text the answer shows (a control token the format writes)
        r = client.chat.completions.create(model=name, messages=ASK, temperature=0, max_tokens=3,
                                           logit_bias={'3': 100})
        assert r.choices[0].message.content.startswith('[TOOL_CALLS]'), r

        # Anthropic's door: the tool_use id is the model's, and its tool_result renders
        ac = anthropic.Anthropic(base_url=srv.base, api_key='x', max_retries=0, timeout=600)
        atools = [{'name': t['function']['name'], 'description': t['function']['description'],
                   'input_schema': t['function']['parameters']} for t in TOOLS]
        m = ac.messages.create(model=name, max_tokens=60, messages=ASK, tools=atools,
                               tool_choice={'type': 'any', 'disable_parallel_tool_use': True},
                               extra_body={'temperature': 0})
        uses = [b for b in m.content if b.type == 'tool_use']
        assert m.stop_reason == 'tool_use' and len(uses) == 1 and re.fullmatch(r'[A-Za-z0-9]{9}', uses[0].id), m
        jsonschema.validate(uses[0].input, SCHEMAS[uses[0].name])
        m2 = ac.messages.create(model=name, max_tokens=6, tools=atools, extra_body={'temperature': 0}, messages=ASK + [
            {'role': 'assistant', 'content': [{'type': 'tool_use', 'id': uses[0].id, 'name': uses[0].name,
                                               'input': uses[0].input}]},
            {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': uses[0].id, 'content': 'sunny'}]}])
        assert m2.stop_reason in ('end_turn', 'max_tokens'), m2
    finally:
        srv.stop()

srv = su.Server(model(None, HARMONY, HARMONY_MARKERS))
try:
    err = open(srv.err_path).read()
    assert 'tool calls: the template writes them as to=functions.' in err, err[-2000:]
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key='x', max_retries=0, timeout=600)
    name = client.models.list().data[0].id
    r = client.chat.completions.create(model=name, messages=ASK, tools=TOOLS, tool_choice='required',
                                       temperature=0, max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason == 'tool_calls' and len(ch.message.tool_calls) == 1 and not ch.message.content, ch
    call = ch.message.tool_calls[0]
    assert call.id.startswith('call_'), call
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    print('harmony: required -> %s %s' % (call.function.name, call.function.arguments))
    with client.chat.completions.stream(model=name, messages=ASK, tools=TOOLS, tool_choice='required',
                                        temperature=0, max_tokens=60) as s:
        final = s.get_final_completion()
    sc = final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == 'tool_calls' and len(sc) == 1, final
    assert (sc[0].function.name, sc[0].function.arguments) == (call.function.name, call.function.arguments), sc
    round_trip(client, name, call)
finally:
    srv.stop()
print('tool-formats: ok')
