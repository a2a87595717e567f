// The official OpenAI SDK (npm `openai`, installed by npm_setup.sh) against
// `hart serve --http-bind`: chat whole and streamed, n > 1, logprobs, stop strings,
// usage with cached tokens, the legacy completions endpoint, and errors.
// Usage: NODE_PATH=<npm dir>/node_modules node openai_sdk_test.cjs http://127.0.0.1:PORT
'use strict';
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

const client = new OpenAI({ baseURL: process.argv[2] + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });

async function collect(stream) {
  const out = { text: {}, reasoning: {}, finish: {}, roles: 0, usage: null, chunks: 0, logprobs: {} };
  for await (const chunk of stream) {
    out.chunks++;
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) out.roles++;
      out.text[c.index] = (out.text[c.index] || '') + (c.delta.content || '');
      out.reasoning[c.index] = (out.reasoning[c.index] || '') + (c.delta.reasoning_content || '');
      if (c.logprobs) out.logprobs[c.index] = (out.logprobs[c.index] || []).concat(c.logprobs.content);
      if (c.finish_reason) out.finish[c.index] = c.finish_reason;
    }
  }
  return out;
}

async function expectError(status, what, promise) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `${what}: not an APIError: ${e}`);
    assert.equal(e.status, status, `${what}: ${e.message}`);
    assert.ok(e.error && typeof e.error.message === 'string' && e.error.message.length > 0, `${what}: no message`);
    return e;
  }
  assert.fail(`${what}: succeeded`);
}

async function main() {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  const model = models.data[0].id;
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello there' }];

  // Whole, greedy, with log-probs: the sampled token is the most likely one.
  const greedy = { model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 };
  const a = await client.chat.completions.create(greedy);
  assert.equal(a.object, 'chat.completion');
  assert.equal(a.model, model);
  assert.equal(a.choices.length, 1);
  assert.equal(a.choices[0].message.role, 'assistant');
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 8);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 8);
  assert.equal(typeof a.usage.prompt_tokens_details.cached_tokens, 'number');
  const lp = a.choices[0].logprobs.content;
  assert.equal(lp.length, 8);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.ok(Array.isArray(t.bytes));
  }

  // The same request streamed: the same text, a role delta, the usage chunk last.
  const s = await collect(await client.chat.completions.create({ ...greedy, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.text[0], a.choices[0].message.content);
  assert.equal(s.finish[0], 'length');
  assert.equal(s.roles, 1);
  assert.equal(s.usage.completion_tokens, 8);
  assert.deepEqual(s.logprobs[0].map((t) => t.logprob), lp.map((t) => t.logprob));

  // A stop string taken from the greedy answer ends it there, as a string and in a list.
  const full = (await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 })).choices[0].message.content;
  let at = 1;
  while (at + 2 < full.length && /[\uFFFD\s]/.test(full.slice(at, at + 2))) at++;
  const stop = full.slice(at, at + 2);
  const want = full.slice(0, full.indexOf(stop));
  for (const form of [stop, [stop, 'never-generated-zz']]) {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stop: form });
    assert.equal(r.choices[0].finish_reason, 'stop', `stop ${JSON.stringify(form)} in ${JSON.stringify(full)}`);
    assert.equal(r.choices[0].message.content, want);
  }

  // n > 1, seeded: three choices, replayed exactly by the same seed; usage sums them.
  const sampled = { model, messages, max_tokens: 6, temperature: 1, seed: 7, n: 3 };
  const b = await client.chat.completions.create(sampled);
  const b2 = await client.chat.completions.create(sampled);
  assert.equal(b.choices.length, 3);
  assert.deepEqual(b.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(b.choices.map((c) => c.message.content), b2.choices.map((c) => c.message.content));
  assert.equal(b.usage.completion_tokens, 18);
  const bs = await collect(await client.chat.completions.create({ ...sampled, stream: true }));
  assert.deepEqual([0, 1, 2].map((i) => bs.text[i]), b.choices.map((c) => c.message.content));
  assert.deepEqual(bs.finish, { 0: 'length', 1: 'length', 2: 'length' });
  assert.equal(bs.usage, null);  // not asked for

  // A long prompt asked twice: the second finds its full pages in the prefix cache.
  const long = [{ role: 'user', content: 'tell me about the sea '.repeat(60) }];
  const c1 = await client.chat.completions.create({ model, messages: long, max_tokens: 2, temperature: 0 });
  const c2 = await client.chat.completions.create({ model, messages: long, max_tokens: 2, temperature: 0 });
  assert.ok(c1.usage.prompt_tokens > 128, `prompt of ${c1.usage.prompt_tokens} tokens`);
  assert.ok(c2.usage.prompt_tokens_details.cached_tokens >= 128, JSON.stringify(c2.usage));

  // The legacy completions endpoint: text prompt, log-probs as numbers of top entries.
  const d = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 1 });
  assert.equal(d.object, 'text_completion');
  assert.equal(d.choices[0].logprobs.token_logprobs.length, 5);
  assert.equal(d.choices[0].logprobs.tokens.length, 5);
  const ds = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, stream: true });
  let dtext = '';
  for await (const chunk of ds) dtext += chunk.choices[0].text;
  assert.equal(dtext, d.choices[0].text);

  // DeepSeek-V4 thinking (chat_template_kwargs, as SGLang and vLLM take it): the prompt ends
  // "<think>" instead of "</think>", the output up to "</think>" is reasoning_content; streamed
  // deltas add up to the whole answer's. Chat mode answers have no reasoning_content.
  const thinking = { model, messages, max_tokens: 12, temperature: 0, ignore_eos: true, chat_template_kwargs: { thinking: true } };
  const t = await client.chat.completions.create(thinking);
  const tm = t.choices[0].message;
  assert.equal(typeof tm.reasoning_content, 'string');
  assert.ok(tm.reasoning_content.length + tm.content.length > 0, JSON.stringify(tm));
  const ts = await collect(await client.chat.completions.create({ ...thinking, stream: true }));
  assert.equal(ts.reasoning[0], tm.reasoning_content);
  assert.equal(ts.text[0], tm.content);
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0, ignore_eos: true });
  assert.equal(plain.choices[0].message.reasoning_content, undefined);
  assert.equal(plain.usage.prompt_tokens, t.usage.prompt_tokens);  // one marker token either way
  await expectError(400, 'unknown template kwarg',
    client.chat.completions.create({ model, messages, chat_template_kwargs: { drop_thinking: false } }));

  // Errors come back as OpenAI's error object with the right status.
  await expectError(404, 'unknown model', client.chat.completions.create({ model: 'gpt-4o', messages }));
  const e = await expectError(400, 'wrong type', client.chat.completions.create({ model, messages, temperature: 'hot' }));
  assert.equal(e.error.param, 'temperature');
  await expectError(400, 'tools', client.chat.completions.create({ model, messages, tools: [{ type: 'function', function: { name: 'f' } }] }));
  await expectError(400, 'unknown role', client.chat.completions.create({ model, messages: [{ role: 'tool', content: 'x', tool_call_id: '1' }] }));
  await expectError(400, 'zero max_tokens', client.chat.completions.create({ model, messages, max_tokens: 0 }));
}

main().then(
  () => console.log('openai sdk: ok'),
  (e) => {
    console.error(e);
    process.exit(1);
  });
