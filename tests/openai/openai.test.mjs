// The openai npm client (pinned in package-lock.json) through vramd's front door: a streaming
// chat completion from a fake vLLM and a model list. Exit 77 (skipped) without node_modules.
// Usage: node openai.test.mjs --harness BUILD/vramd_proxy_harness --fake BUILD/fake-gpu-server
//          --node-modules DIR
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, existsSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import assert from 'node:assert/strict';

const arg = (name) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
};
const modules = arg('--node-modules');
if (!modules || !existsSync(join(modules, 'openai'))) {
  console.log(`SKIPPED: the openai package is not installed in ${modules} (npm ci failed?)`);
  process.exit(77);
}
const require = createRequire(join(resolve(modules), 'noop.js'));
const OpenAI = require('openai');

const children = [];
const dir = mkdtempSync(join(tmpdir(), 'vramd-openai-'));
function cleanup() {
  for (const c of children) c.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}
process.on('exit', cleanup);

// Starts a program that prints "ready PORT..." and resolves to those numbers.
function start(cmd, args, env = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/ready ([\d ]+)\n/);
      if (m) resolve(m[1].trim().split(' ').map(Number));
    });
    child.on('exit', (code) => reject(new Error(`${cmd} exited with ${code}`)));
    setTimeout(() => reject(new Error(`${cmd} did not become ready`)), 10000);
  });
}

const state = join(dir, 'state.json');
writeFileSync(state, JSON.stringify({ driver_version: '550.54.14', gpus: [{ name: 'NVIDIA GeForce RTX 3090',
  uuid: 'GPU-fa4e0000-0000-0000-0000-000000000000', total: 25769803776, used: 0, utilization: 0, processes: [] }] }));
const [vllmPort] = await start(arg('--fake'), ['--kind', 'vllm', '--port', '0', '--state', state,
  '--model', 'Qwen/Qwen2.5-7B-Instruct']);
const [front] = await start(arg('--harness'), ['--front', '127.0.0.1:0', '--alias', 'gpt-4o-mini=Qwen/Qwen2.5-7B-Instruct',
  '--service', 'vllm', `http://127.0.0.1:${vllmPort}`, '-', 'Qwen/Qwen2.5-7B-Instruct']);

const client = new OpenAI({ baseURL: `http://127.0.0.1:${front}/v1`, apiKey: 'unused', maxRetries: 0 });

const models = await client.models.list();
const ids = models.data.map((m) => `${m.id}:${m.owned_by}`).sort();
assert.deepEqual(ids, ['Qwen/Qwen2.5-7B-Instruct:vllm', 'gpt-4o-mini:vllm']);

const stream = await client.chat.completions.create({
  model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }],
});
let text = '';
const arrivals = [];
const t0 = Date.now();
for await (const chunk of stream) {
  arrivals.push(Date.now() - t0);
  text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(chunk.model, 'Qwen/Qwen2.5-7B-Instruct');
}
assert.equal(text, 'Hello from the fake');
// The fake sends a chunk every 50 ms: streamed chunks arrive spread out, not all at the end.
assert.ok(arrivals[arrivals.length - 1] - arrivals[0] >= 150, `chunks arrived together: ${arrivals}`);

await assert.rejects(
  client.chat.completions.create({ model: 'gpt-5', messages: [{ role: 'user', content: 'hi' }] }),
  (e) => e.status === 404 && /known models: .*Qwen/.test(e.message));
console.log(`ok: models ${ids.join(', ')}; streamed "${text}" in ${arrivals.length} chunks`);
process.exit(0);
