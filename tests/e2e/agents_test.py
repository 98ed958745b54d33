# agents_test.py — the Responses API and Anthropic's Messages API through a
# real `ember serve` with a real model that calls tools
# (Qwen2.5-Coder-0.5B-Instruct, fetched by scripts/fetch-model.sh; skipped
# without it), driven by the official SDKs: openai's responses (plain,
# streamed through its helper, function tools, a call's output fed back,
# previous_response_id continuing without resending, retrieve, input_items,
# delete, text.format json_schema, a built-in tool refused) and anthropic's
# messages (plain, streamed through its helper, stop_sequences, tools with a
# tool_use -> tool_result round trip, count_tokens, x-api-key and Bearer,
# its error shape); every call and tool_use input that comes back validates
# against its schema (python3-jsonschema; many seeds at temperature 1 are
# tools_test.py's, through the same grammar); the ledger names each row's
# endpoint.
import json

import serve_util as su

try:
    import anthropic
    import jsonschema
    import openai
except ImportError as e:
    su.skip('%s (scripts/setup.sh installs python3-jsonschema, scripts/venv.sh the openai and anthropic SDKs)' % e)

MODEL = su.tools_model()

WEATHER = {'type': 'object', 'properties': {
    'city': {'type': 'string'},
    'unit': {'type': 'string', 'enum': ['celsius', 'fahrenheit']},
    'days': {'type': 'integer', 'minimum': 1, 'maximum': 7}}, 'required': ['city'], 'additionalProperties': False}
ORDER = {'type': 'object', 'properties': {
    'item': {'type': 'string', 'maxLength': 30},
    'quantity': {'type': 'integer', 'minimum': 1, 'maximum': 99},
    'express': {'type': 'boolean'}}, 'required': ['item', 'quantity'], 'additionalProperties': False}
SCHEMAS = {'get_weather': WEATHER, 'place_order': ORDER}

srv = su.Server(MODEL)
try:
    oa = openai.OpenAI(base_url=srv.base + '/v1', api_key='sk-no-key-required', max_retries=0, timeout=600)
    name = oa.models.list().data[0].id

    # ---- the Responses API
    r = oa.responses.create(model=name, instructions='Answer in one short sentence.',
                            input='What is the capital of France?', max_output_tokens=40, temperature=0)
    assert r.status == 'completed' and r.output_text and r.output[0].type == 'message', r
    assert r.usage.input_tokens > 10 and r.usage.output_tokens > 0, r.usage
    first = r
    # continued by id: the earlier turn is not resent, yet the model has it
    r2 = oa.responses.create(model=name, input='And of Italy?', previous_response_id=first.id, max_output_tokens=40,
                             temperature=0)
    assert r2.previous_response_id == first.id and r2.output_text, r2
    assert r2.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens - 10, (r2.usage, first.usage)
    got = oa.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == first.output_text, got
    items = list(oa.responses.input_items.list(first.id))
    assert items and items[0].content[0].text == 'What is the capital of France?', items
    print('responses: plain %r, continued %r' % (first.output_text[:40], r2.output_text[:40]))

    # function tools: the call, its output fed back, the answer
    tools = [{'type': 'function', 'name': 'get_weather', 'description': 'Get the weather forecast for a city',
              'parameters': WEATHER, 'strict': True}]
    r = oa.responses.create(model=name, input='What is the weather in Paris for 2 days?', tools=tools,
                            tool_choice='required', max_output_tokens=80, temperature=0)
    calls = [o for o in r.output if o.type == 'function_call']
    assert calls and calls[0].name == 'get_weather', r.output
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    r3 = oa.responses.create(model=name, previous_response_id=r.id, tools=tools, tool_choice='none',
                             input=[{'type': 'function_call_output', 'call_id': calls[0].call_id,
                                     'output': '{"forecast": ["sunny", "rain"]}'}], max_output_tokens=40,
                             temperature=0)
    assert r3.output_text and r3.previous_response_id == r.id, r3
    try:   # the output alone answers no call: the stored call was what made it valid above
        oa.responses.create(model=name, tools=tools, input=[{'type': 'function_call_output',
                                                            'call_id': calls[0].call_id, 'output': 'x'}])
        raise AssertionError('a function_call_output answering no call was accepted')
    except openai.BadRequestError as e:
        assert e.body['param'] == 'input' and 'answers no tool call' in e.body['message'], e.body
    print('responses: call %s(%s), then %r' % (calls[0].name, calls[0].arguments, r3.output_text[:40]))

    # streamed through the SDK's helper: the event sequence it checks
    with oa.responses.stream(model=name, input='What is the weather in Oslo?', tools=tools, tool_choice='required',
                             max_output_tokens=80, temperature=0) as s:
        kinds = [ev.type for ev in s]
        final = s.get_final_response()
    assert kinds[:2] == ['response.created', 'response.in_progress'] and kinds[-1] == 'response.completed', kinds
    assert 'response.function_call_arguments.delta' in kinds and 'response.output_item.done' in kinds, kinds
    fc = [o for o in final.output if o.type == 'function_call']
    assert fc and fc[0].status == 'completed', final.output
    jsonschema.validate(json.loads(fc[0].arguments), WEATHER)
    # text.format: a JSON schema the answer follows
    fmt = {'type': 'json_schema', 'name': 'city', 'schema': {'type': 'object', 'properties': {
        'city': {'type': 'string', 'maxLength': 20}}, 'required': ['city'], 'additionalProperties': False}}
    r = oa.responses.create(model=name, input='Name a city in Spain.', text={'format': fmt}, max_output_tokens=40,
                            temperature=0)
    jsonschema.validate(json.loads(r.output_text), fmt['schema'])
    # refused by name
    for kw, param in (({'tools': [{'type': 'web_search'}]}, 'tools[0]'),
                      ({'previous_response_id': 'resp_nope'}, 'previous_response_id'),
                      ({'input': [{'type': 'input_image'}]}, 'input[0]')):
        body = dict(model=name, input='x', max_output_tokens=4)
        body.update(kw)
        try:
            oa.responses.create(**body)
            raise AssertionError('accepted: %r' % kw)
        except (openai.BadRequestError, openai.NotFoundError) as e:
            assert e.body['param'] == param, e.body
    oa.responses.delete(first.id)
    try:
        oa.responses.retrieve(first.id)
        raise AssertionError('a deleted response was found')
    except openai.NotFoundError:
        pass
    # stored per key: another key does not see this one's responses
    key = su.add_key(srv.db, 'agents-other')
    other = openai.OpenAI(base_url=srv.base + '/v1', api_key=key, max_retries=0)
    try:
        other.responses.retrieve(r2.id)
        raise AssertionError("another key read this key's response")
    except openai.NotFoundError:
        pass
    print('responses: streamed, json_schema, refusals, delete and per-key store as asked')

    # ---- Anthropic's Messages API
    an = anthropic.Anthropic(base_url=srv.base, api_key='sk-no-key-required', max_retries=0, timeout=600)
    m = an.messages.create(model=name, max_tokens=40, system='Answer in one short sentence.',
                           messages=[{'role': 'user', 'content': 'What is the capital of France?'}], extra_body={'temperature': 0})
    assert m.type == 'message' and m.role == 'assistant' and m.content[0].type == 'text' and m.content[0].text, m
    assert m.stop_reason in ('end_turn', 'max_tokens') and m.usage.output_tokens > 0, m
    m = an.messages.create(model=name, max_tokens=40, stop_sequences=['.'], extra_body={'temperature': 0},
                           messages=[{'role': 'user', 'content': 'Write two sentences about Paris.'}])
    assert m.stop_reason == 'stop_sequence' and m.stop_sequence == '.', m
    with an.messages.stream(model=name, max_tokens=30, extra_body={'temperature': 0},
                            messages=[{'role': 'user', 'content': 'Say hello.'}]) as s:
        streamed = ''.join(s.text_stream)
        final = s.get_final_message()
    assert streamed and final.content[0].text == streamed, (streamed, final)
    n = an.messages.count_tokens(model=name, messages=[{'role': 'user', 'content': 'What is the capital of France?'}],
                                 system='Answer in one short sentence.')
    assert n.input_tokens > 10, n
    # tools: tool_use, its tool_result, the answer
    atools = [{'name': 'get_weather', 'description': 'Get the weather forecast for a city', 'input_schema': WEATHER},
              {'name': 'place_order', 'description': 'Order an item from the shop', 'input_schema': ORDER}]
    ask = [{'role': 'user', 'content': 'What is the weather in Tokyo?'}]
    m = an.messages.create(model=name, max_tokens=80, tools=atools, tool_choice={'type': 'any'}, messages=ask,
                           extra_body={'temperature': 0})
    uses = [b for b in m.content if b.type == 'tool_use']
    assert m.stop_reason == 'tool_use' and uses and uses[0].id.startswith('toolu_'), m
    jsonschema.validate(uses[0].input, SCHEMAS[uses[0].name])
    follow = ask + [{'role': 'assistant', 'content': m.content},
                    {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': uses[0].id,
                                                  'content': 'Sunny, 24 C'}]}]
    m2 = an.messages.create(model=name, max_tokens=40, tools=atools, tool_choice={'type': 'none'}, messages=follow,
                            extra_body={'temperature': 0})
    assert m2.content[0].type == 'text' and m2.content[0].text, m2
    with an.messages.stream(model=name, max_tokens=80, tools=atools, messages=ask, extra_body={'temperature': 0},
                            tool_choice={'type': 'tool', 'name': 'get_weather'}) as s:
        events = [ev.type for ev in s]
        final = s.get_final_message()
    assert 'content_block_start' in events and 'message_stop' in events, events
    tu = [b for b in final.content if b.type == 'tool_use']
    assert tu and tu[0].name == 'get_weather', final
    jsonschema.validate(tu[0].input, WEATHER)
    print('messages: plain, stop_sequence, streamed, count_tokens %d, tool_use %s(%s)'
          % (n.input_tokens, uses[0].name, json.dumps(uses[0].input)))
    # its errors: Anthropic's shape
    try:
        an.messages.create(model=name, max_tokens=10, messages=[{'role': 'user', 'content': [
            {'type': 'image', 'source': {'type': 'base64', 'media_type': 'image/png', 'data': ''}}]}])
        raise AssertionError('an image block was accepted')
    except anthropic.BadRequestError as e:
        assert e.body['type'] == 'error' and e.body['error']['type'] == 'invalid_request_error', e.body
    st, _, body = srv.post('/v1/messages', {'model': name, 'messages': [{'role': 'user', 'content': 'x'}]})
    assert st == 400 and body['error']['type'] == 'invalid_request_error' and 'max_tokens' in body['error']['message']
    # the key in x-api-key or as Bearer
    for hdr in ({'x-api-key': key}, {'Authorization': 'Bearer ' + key}):
        st, _, body = srv.post('/v1/messages', {'model': name, 'max_tokens': 2, 'messages': [
            {'role': 'user', 'content': 'hi'}]}, headers=hdr)
        assert st == 200 and body['type'] == 'message', (hdr, st, body)

    rows = srv.ledger_settled(1, tries=300) and srv.ledger(
        'SELECT endpoint, count(*) AS n, sum(tool_calls) AS calls FROM requests GROUP BY endpoint')
    by = {r['endpoint']: r for r in rows}
    assert by['responses']['n'] >= 7 and by['messages']['n'] >= 6 and by['messages']['calls'] >= 2, rows
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('agents: ok')
