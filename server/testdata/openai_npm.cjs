// Drives a modrun server with the official npm `openai` package, as an
// application would (TestNPMOpenAIClient starts the servers, installs the
// package and checks what this prints). Reads its configuration as JSON on
// stdin; prints one JSON document of what the server answered.
'use strict';
const OpenAI = require('openai');

async function main() {
  let input = '';
  for await (const chunk of process.stdin) input += chunk;
  const cfg = JSON.parse(input);
  // No retries: a failed request is the server's answer, not something to hide.
  const opts = { apiKey: 'unused', maxRetries: 0, timeout: 120000 };
  const formatClient = new OpenAI({ ...opts, baseURL: cfg.formatURL + '/v1' });
  const toolsClient = new OpenAI({ ...opts, baseURL: cfg.toolsURL + '/v1' });
  const out = { version: require('openai/version').VERSION, format: [], tools: [] };

  for (const seed of cfg.seeds) {
    // (1) Structured output: the SDK's own type, content parsed as JSON here.
    const res = await formatClient.chat.completions.create({
      model: 'tinystories-mod', max_tokens: 300, temperature: 1, seed,
      messages: [{ role: 'user', content: 'Describe Lily as JSON.' }],
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: cfg.schema, strict: true } },
    });
    out.format.push({ seed, finish_reason: res.choices[0].finish_reason, parsed: JSON.parse(res.choices[0].message.content) });
  }

  for (const seed of cfg.seeds) {
    // (2) A tool call, required, one at a time (a random model would chain
    // calls to max_tokens).
    const params = {
      model: 'tinystories-mod', max_tokens: 300, temperature: 1, seed,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools: cfg.tools, tool_choice: 'required', parallel_tool_calls: false,
    };
    const res = await toolsClient.chat.completions.create(params);
    const message = res.choices[0].message;

    // Streamed: tool_calls come as deltas keyed by index; the id and name
    // in the first, the arguments in pieces (as the SDK's docs accumulate them).
    const stream = await toolsClient.chat.completions.create({ ...params, stream: true });
    const calls = [];
    let finish = null, argDeltas = 0;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      for (const d of choice.delta.tool_calls ?? []) {
        const call = (calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (d.id) call.id = d.id;
        if (d.type) call.type = d.type;
        if (d.function?.name) call.function.name += d.function.name;
        if (d.function?.arguments) { call.function.arguments += d.function.arguments; argDeltas++; }
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }

    // (3) The tool's result goes back; the conversation goes on. Twice,
    // with a longer result the second time: its prompt is longer only if
    // the result is in it.
    const followUp = (content, max_tokens) => toolsClient.chat.completions.create({
      ...params, tool_choice: 'none', max_tokens,
      messages: [...params.messages, message, { role: 'tool', tool_call_id: message.tool_calls[0].id, content }],
    });
    const follow = await followUp('{"temperature": 21}', 8);
    const longer = await followUp('{"temperature": 21, "sky": "clear", "wind": "calm"}', 1);
    out.tools.push({
      seed,
      finish_reason: res.choices[0].finish_reason, tool_calls: message.tool_calls, prompt_tokens: res.usage.prompt_tokens,
      stream: { finish_reason: finish, tool_calls: calls, argument_deltas: argDeltas },
      follow_up: { prompt_tokens: follow.usage.prompt_tokens, longer_result_prompt_tokens: longer.usage.prompt_tokens, finish_reason: follow.choices[0].finish_reason, content: follow.choices[0].message.content, tool_calls: follow.choices[0].message.tool_calls ?? [] },
    });
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
