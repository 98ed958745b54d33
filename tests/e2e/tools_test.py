# tools_test.py — tool calling through a real `ember serve` with a real
# model whose template writes calls (Qwen2.5-Coder-0.5B-Instruct, fetched by
# scripts/fetch-model.sh; skipped without it), driven by the official
# openai SDK: tool_choice auto, required, a named tool and none, plain and
# streamed (the SDK's stream helper assembles the calls; they equal the
# plain answer's), parallel_tool_calls false, a whole round trip with the
# tool's result, 16 answers at temperature 1 whose every call parses and
# validates against its tool's schema (Debian's python3-jsonschema), the
# ledger's finish_reason, and bad requests refused with the parameter named.
import json
import threading

import serve_util as su

try:
    import jsonschema
    import openai
except ImportError as e:
    su.skip('%s (scripts/setup.sh installs python3-jsonschema, scripts/venv.sh the openai SDK)' % e)

MODEL = su.tools_model()

WEATHER = {'type': 'object', 'properties': {
    'city': {'type': 'string', 'description': 'the city'},
    'unit': {'type': 'string', 'enum': ['celsius', 'fahrenheit']},
    'days': {'type': 'integer', 'minimum': 1, 'maximum': 7}}, 'required': ['city']}
EVENT = {'type': 'object', 'properties': {
    'title': {'type': 'string', 'maxLength': 40},
    'date': {'type': 'string', 'format': 'date'},
    'attendees': {'type': 'array', 'items': {'type': 'string'}, 'maxItems': 5},
    'priority': {'type': 'integer', 'minimum': 1, 'maximum': 3},
    'place': {'type': 'object', 'properties': {'room': {'type': 'string'}, 'floor': {'type': 'integer'}},
              'required': ['room'], 'additionalProperties': False}},
    'required': ['title', 'date'], 'additionalProperties': False}
TOOLS = [
    {'type': 'function', 'function': {'name': 'get_weather', 'description': 'Get the weather forecast for a city',
                                      'parameters': WEATHER}},
    {'type': 'function', 'function': {'name': 'create_event', 'description': 'Put an event in the calendar',
                                      'parameters': EVENT, 'strict': True}},
    {'type': 'function', 'function': {'name': 'get_time', 'description': 'The current time'}},
]
SCHEMAS = {'get_weather': WEATHER, 'create_event': EVENT, 'get_time': {'type': 'object', 'properties': {}}}


def valid(call):
    """A returned call: a known tool, arguments that parse and validate against its schema."""
    assert call.type == 'function' and call.id.startswith('call_'), call
    assert call.function.name in SCHEMAS, call
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name], format_checker=jsonschema.FormatChecker())
    return call.function.name, args


srv = su.Server(MODEL)
try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key='sk-no-key-required', max_retries=0, timeout=600)
    name = client.models.list().data[0].id
    weather = [{'role': 'user', 'content': 'What will the weather be in Paris for the next 3 days?'}]

    # auto: the model decides to call, and the call is the answer
    r = client.chat.completions.create(model=name, messages=weather, tools=TOOLS, temperature=0, max_tokens=80)
    ch = r.choices[0]
    assert ch.finish_reason == 'tool_calls' and ch.message.tool_calls, ch
    assert ch.message.content is None, ch.message
    first = [valid(c) for c in ch.message.tool_calls]
    assert first[0][0] == 'get_weather' and 'paris' in first[0][1]['city'].lower(), first
    print('tools: auto ->', first)

    # streamed: the SDK's helper assembles the same calls from delta.tool_calls
    with client.chat.completions.stream(model=name, messages=weather, tools=TOOLS, temperature=0,
                                        max_tokens=80) as s:
        chunks = [e for e in s if e.type == 'chunk']
        final = s.get_final_completion()
    deltas = [c.chunk.choices[0].delta for c in chunks if c.chunk.choices]
    starts = [t for d in deltas for t in (d.tool_calls or []) if t.id]
    assert starts and all(t.function.name for t in starts), starts   # id and name come first
    assert sum(1 for d in deltas for t in (d.tool_calls or []) if t.function.arguments) >= 2   # arguments in pieces
    fc = final.choices[0]
    assert fc.finish_reason == 'tool_calls', fc
    assert [valid(c) for c in fc.message.tool_calls] == first, (fc.message.tool_calls, first)
    assert [c.function.arguments for c in fc.message.tool_calls] == [c.function.arguments
                                                                      for c in ch.message.tool_calls]

    # required: a call even where the model would rather talk
    hello = [{'role': 'user', 'content': 'Say hello to me.'}]
    r = client.chat.completions.create(model=name, messages=hello, tools=TOOLS, tool_choice='required',
                                       temperature=0, max_tokens=80)
    assert r.choices[0].finish_reason == 'tool_calls', r.choices[0]
    [valid(c) for c in r.choices[0].message.tool_calls]
    # a named tool: that one
    r = client.chat.completions.create(model=name, messages=weather, tools=TOOLS, temperature=0, max_tokens=80,
                                       tool_choice={'type': 'function', 'function': {'name': 'create_event'}})
    named = [valid(c) for c in r.choices[0].message.tool_calls]
    assert [n for n, _ in named] == ['create_event'], named
    # none: text, no call
    r = client.chat.completions.create(model=name, messages=weather, tools=TOOLS, tool_choice='none',
                                       temperature=0, max_tokens=24)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content, r.choices[0]
    assert r.choices[0].finish_reason in ('stop', 'length'), r.choices[0]
    # parallel_tool_calls false: one call at most, whatever is asked
    two = [{'role': 'user', 'content': 'Get the weather in Paris, then the weather in Tokyo, then in Oslo.'}]
    r = client.chat.completions.create(model=name, messages=two, tools=TOOLS, tool_choice='required',
                                       parallel_tool_calls=False, temperature=0, max_tokens=60)
    assert len(r.choices[0].message.tool_calls) == 1, r.choices[0].message.tool_calls
    print('tools: required, named, none and parallel_tool_calls false as asked')

    # a whole round trip: the call, the tool's result, the answer
    call = ch.message.tool_calls[0]
    trip = weather + [
        {'role': 'assistant', 'content': None, 'tool_calls': [
            {'id': call.id, 'type': 'function',
             'function': {'name': call.function.name, 'arguments': call.function.arguments}}]},
        {'role': 'tool', 'tool_call_id': call.id, 'content': json.dumps(
            {'forecast': ['sunny, 21 C', 'rain, 15 C', 'cloudy, 18 C']})}]
    r = client.chat.completions.create(model=name, messages=trip, tools=TOOLS, temperature=0, max_tokens=60)
    assert r.usage.prompt_tokens > 470, r.usage   # the tools, the call and its result were all in the prompt
    [valid(c) for c in r.choices[0].message.tool_calls or []]   # (a small model may call again)
    r = client.chat.completions.create(model=name, messages=trip, tools=TOOLS, tool_choice='none', temperature=0,
                                       max_tokens=60)
    assert r.choices[0].message.content and r.choices[0].finish_reason in ('stop', 'length'), r.choices[0]
    print('tools: round trip ->', repr(r.choices[0].message.content[:80]))

    # many seeds at temperature 1: every call that comes back validates
    prompts = ['Book a meeting called Budget review on 2027-03-14 with Ann and Bo in room 4B.',
               'What time is it?',
               'Tell me a joke about compilers.',
               'Is it going to rain in Tokyo tomorrow? Use fahrenheit.']
    results, errors = [], []

    def sample(i, p):
        try:
            r = client.chat.completions.create(model=name, messages=[{'role': 'user', 'content': p}], tools=TOOLS,
                                               temperature=1.0, seed=1000 + i, n=4, max_tokens=80)
            results.append(r)
        except Exception as e:   # noqa: BLE001 — reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=sample, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=1200)
    assert not errors, errors
    assert len(results) == len(prompts)
    answers = [c for r in results for c in r.choices]
    called = [c for c in answers if c.message.tool_calls]
    n_calls = 0
    for c in answers:
        if c.message.tool_calls:
            assert c.finish_reason in ('tool_calls', 'length'), c
            for tc in c.message.tool_calls:
                valid(tc)
                n_calls += 1
        else:
            assert c.finish_reason in ('stop', 'length'), c
    assert called, 'no answer made a call'
    print('tools: %d answers at temperature 1 (%d prompts x 4 choices): %d made calls, %d calls, every one valid'
          % (len(answers), len(prompts), len(called), n_calls))

    # bad requests: 400 with the parameter named
    def refused(param, **kw):
        body = dict(model=name, messages=weather, max_tokens=4, tools=TOOLS)
        body.update(kw)
        try:
            client.chat.completions.create(**body)
        except openai.BadRequestError as e:
            assert e.body['param'] == param, (param, e.body)
            return e.body['message']
        raise AssertionError('accepted: %r' % kw)
    m = refused('tools[0]', tools=[{'type': 'function', 'function': {'name': 'tag', 'parameters': {
        'type': 'object', 'properties': {'t': {'type': 'array', 'uniqueItems': True}}}}}])
    assert "tool 'tag'" in m and '#/properties/t' in m, m
    refused('tool_choice', tool_choice={'type': 'function', 'function': {'name': 'rm_rf'}})
    refused('messages[1]', messages=weather + [{'role': 'tool', 'tool_call_id': 'call_nope', 'content': 'x'}])
    refused('messages[0]', messages=[{'role': 'user', 'content': 'x', 'tool_calls': [
        {'id': 'a', 'type': 'function', 'function': {'name': 'f', 'arguments': '{}'}}]}])
    refused('tools', response_format={'type': 'json_object'})
    r = client.chat.completions.create(model=name, messages=weather, tools=TOOLS, tool_choice='required', max_tokens=60,
                                       temperature=0, response_format={'type': 'text'})   # (asks for no structure)
    assert r.choices[0].finish_reason == 'tool_calls', r.choices[0]
    refused('tools', tools=[{'type': 'function', 'function': {'name': 'f%d' % i}} for i in range(129)])
    print('tools: bad requests refused by name')

    rows = srv.ledger_settled(1)
    fr = [r['finish_reason'] for r in rows]
    assert fr.count('tool_calls') >= 4, fr
finally:
    rc, err = srv.stop()
assert rc == 0, err
assert 'tool calls: the template writes them as <tool_call>' in err, err
print('tools: ok')
