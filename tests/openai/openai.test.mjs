// The openai npm client (pinned in package-lock.json) through the front door of the real daemon
// (`vramd serve` on the test GPU): a model list, a streaming chat completion from a fake vLLM,
// and a streaming request held while vramd wakes the vLLM it put to sleep. Exit 77 (skipped)
// without node_modules.
// Usage: node openai.test.mjs --vramd BUILD/vramd --nvml BUILD/libnvidia-ml-fake.so
//          --fake BUILD/fake-gpu-server --node-modules DIR
import { spawn } from 'node:child_process';
import net from 'node:net';
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
// Two free ports for the daemon's API and its front door.
const freePort = () => new Promise((res) => {
  const srv = net.createServer().listen(0, '127.0.0.1', () => { const p = srv.address().port; srv.close(() => res(p)); });
});
const api = await freePort();
const front = await freePort();
writeFileSync(join(dir, 'vramd.toml'), `[daemon]
listen = "127.0.0.1:${api}"
state_dir = "${join(dir, 'state')}"
sample_interval = "200ms"
[gpu]
backend = "nvml"
[proxy]
listen = "127.0.0.1:${front}"
aliases = { "gpt-4o-mini" = "Qwen/Qwen2.5-7B-Instruct" }
[services.vllm]
kind = "vllm"
url = "http://127.0.0.1:${vllmPort}"
models = ["Qwen/Qwen2.5-7B-Instruct"]
`);
const daemon = spawn(arg('--vramd'), ['serve', '--config', join(dir, 'vramd.toml')], {
  env: { ...process.env, VRAMD_NVML_LIBRARY: arg('--nvml'), FAKE_NVML_STATE: state }, stdio: ['ignore', 'ignore', 'pipe'] });
children.push(daemon);
let daemonLog = '';
daemon.stderr.on('data', (d) => { daemonLog += d; });
const apiGet = async (path) => (await fetch(`http://127.0.0.1:${api}${path}`)).json();
async function until(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    try { if (await fn()) return; } catch (e) { /* not up yet */ }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}\n${daemonLog}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
await until('vllm up and holding its memory', async () => {
  const s = await apiGet('/v1/services/vllm');
  return s.state === 'up' && s.bytes > 0;
});

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
// Asleep: vramd put it to sleep (verified freed); a streaming request through the front door is
// held while vramd wakes it, and then streams as before.
const unload = await (await fetch(`http://127.0.0.1:${api}/v1/services/vllm/unload`, { method: 'POST' })).json();
assert.equal(unload.outcome, 'freed', JSON.stringify(unload));
const held = await client.chat.completions.create({
  model: 'Qwen/Qwen2.5-7B-Instruct', stream: true, messages: [{ role: 'user', content: 'again' }],
});
let again = '';
for await (const chunk of held) again += chunk.choices[0]?.delta?.content ?? '';
assert.equal(again, 'Hello from the fake');
const events = (await apiGet('/v1/events?limit=200')).events.filter((e) => e.type === 'service.woken');
assert.equal(events.length, 1, JSON.stringify(events));
console.log(`ok: models ${ids.join(', ')}; streamed "${text}" in ${arrivals.length} chunks; ` +
            `woken and streamed again: ${events[0].message}`);
process.exit(0);
