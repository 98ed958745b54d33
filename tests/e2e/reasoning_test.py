# reasoning_test.py — reasoning kept apart from the answer, through a real
# `ember serve` with a real model (SmolLM2-135M): a grammar forces a think
# block at the start of the answer (a model that thinks writes one itself),
# and the answer comes back split — `message.reasoning_content` and
# `content`, the streamed `delta.reasoning_content` adding up to the same,
# `usage.completion_tokens_details.reasoning_tokens` counting the block's
# tokens (also in the ledger); `include_reasoning: false` leaves the
# reasoning out; a think block that is not at the start stays text; bad
# reasoning parameters are refused by name.
import serve_util as su

try:
    import openai
except ImportError as e:
    su.skip('%s (scripts/venv.sh installs the openai SDK)' % e)

THINK = 'root ::= "<think>\\n" [a-z ]{10,60} "\\n</think>\\n\\n" [A-Za-z ,.]{5,40}'
LATE = 'root ::= "So. <think>" [a-z ]{3,20} "</think> done"'

srv = su.Server(su.chat_model())
try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key='sk-no-key-required', max_retries=0, timeout=600)
    name = client.models.list().data[0].id
    msgs = [{'role': 'user', 'content': 'Is 7 a prime number?'}]
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=80, temperature=0,
                                       extra_body={'grammar': THINK})
    m = r.choices[0].message
    reasoning = m.model_extra.get('reasoning_content')
    assert reasoning and m.content, m
    assert '<think>' not in m.content and '</think>' not in m.content and '<think>' not in reasoning, m
    assert reasoning == reasoning.strip() and m.content == m.content.lstrip(), m
    assert set(reasoning) <= set('abcdefghijklmnopqrstuvwxyz '), reasoning   # what the grammar let it write
    n_think = r.usage.completion_tokens_details.reasoning_tokens
    assert 4 <= n_think < r.usage.completion_tokens, r.usage
    print('reasoning: %r | %r (%d of %d tokens)' % (reasoning, m.content, n_think, r.usage.completion_tokens))

    # streamed: the reasoning deltas, then the answer's, add up to the same
    s = client.chat.completions.create(model=name, messages=msgs, max_tokens=80, temperature=0, stream=True,
                                       stream_options={'include_usage': True}, extra_body={'grammar': THINK})
    rs, cs, order, usage = '', '', [], None
    for ch in s:
        if not ch.choices:
            usage = ch.usage
            continue
        d = ch.choices[0].delta
        if (d.model_extra or {}).get('reasoning_content'):
            rs += d.model_extra['reasoning_content']
            order.append('r')
        if d.content:
            cs += d.content
            order.append('c')
    assert (rs, cs) == (reasoning, m.content), (rs, cs)
    assert 'r' in order and order.index('c') > max(i for i, k in enumerate(order) if k == 'r'), order
    assert usage.completion_tokens_details.reasoning_tokens == n_think, usage

    # include_reasoning false: the answer alone, the tokens still counted
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=80, temperature=0,
                                       extra_body={'grammar': THINK, 'include_reasoning': False})
    assert 'reasoning_content' not in (r.choices[0].message.model_extra or {}), r.choices[0].message
    assert r.choices[0].message.content == m.content and r.usage.completion_tokens_details.reasoning_tokens == n_think

    # a block that is not where the answer begins is the answer's text
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=40, temperature=0,
                                       extra_body={'grammar': LATE})
    assert r.choices[0].message.content.startswith('So. <think>'), r.choices[0].message
    assert not (r.choices[0].message.model_extra or {}).get('reasoning_content')
    assert r.usage.completion_tokens_details.reasoning_tokens == 0, r.usage

    # bad parameters: 400 naming them
    for body, param in (({'include_reasoning': 'yes'}, 'include_reasoning'),
                        ({'reasoning_effort': 'extreme'}, 'reasoning_effort'),
                        ({'chat_template_kwargs': ['enable_thinking']}, 'chat_template_kwargs')):
        try:
            client.chat.completions.create(model=name, messages=msgs, max_tokens=4, extra_body=body)
            raise AssertionError('accepted: %r' % body)
        except openai.BadRequestError as e:
            assert e.body['param'] == param, e.body
    # template variables reach the template (SmolLM2's ignores them: the same answer)
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=8, temperature=0,
                                       reasoning_effort='low', extra_body={'chat_template_kwargs':
                                                                           {'enable_thinking': False}})
    assert r.choices[0].message.content
finally:
    rc, err = srv.stop()
assert rc == 0, err
assert 'reasoning: <think>...</think>' in err, err
print('reasoning: ok')
