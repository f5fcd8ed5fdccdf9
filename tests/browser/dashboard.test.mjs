// Browser test of the dashboard: `vramd demo` (simulated 24 GiB GPU, an idle fake ComfyUI holding
// 16 GiB, a fake Ollama, a managed "whisper" that crashes) driven by Debian's chromium through
// playwright-core. Run by ctest (cmake/browser_tests.cmake):
//   node dashboard.test.mjs --vramd build/vramd --node-modules build/browser-tests/node_modules
//        [--chromium /usr/bin/chromium] [--screenshots build/screenshots] [--url http://...]
// --url tests a dashboard that is already running instead of starting a demo.
// Exit 0: passed; 1: failed; 77: skipped (chromium is not installed).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const GiB = 1024 ** 3;
// The demo runs with this token, so the dashboard has to ask for it (where vramd enforces tokens).
const TOKEN = 'browser-test-' + Math.random().toString(36).slice(2);

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--')) throw new Error(`unexpected argument ${argv[i]}`);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  return out;
}
const args = parseArgs(process.argv.slice(2));
const chromiumPath = args.chromium || '/usr/bin/chromium';
const shots = path.resolve(args.screenshots || 'screenshots');

if (!chromiumPath || !fs.existsSync(chromiumPath)) {
  console.log(`SKIPPED: chromium is not installed (looked for ${chromiumPath || 'chromium'}); ` +
              'install it with `apt-get install chromium` or `make deps` to run the browser tests.');
  process.exit(77);
}

const require = createRequire(path.join(path.resolve(args['node-modules'] || 'node_modules'), 'x.js'));
const { chromium } = require('playwright-core');

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
  return ok;
}

// Starts `vramd demo` on a free port; resolves with its base URL once the banner names it.
function startDemo(vramd) {
  return new Promise((resolve, reject) => {
    const child = spawn(vramd, ['demo', '--listen', '127.0.0.1:0', '--duration', '300'],
                        { stdio: ['ignore', 'pipe', 'pipe'], env: Object.assign({}, process.env, { VRAMD_DEMO_TOKEN: TOKEN }) });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`vramd demo printed no URL in 30 s:\n${out}`)), 30000);
    const onData = (d) => {
      out += d;
      const m = out.match(/(?:Dashboard|API):\s+(http:\/\/[\d.]+:\d+)/);
      const front = out.match(/Front door:\s+(http:\/\/[\d.]+:\d+)/);
      const comfy = out.match(/ComfyUI via vramd:\s+(http:\/\/[\d.]+:\d+)/);
      if (m && front && comfy) {
        clearTimeout(timer);
        resolve({ child, url: m[1] + '/', front: front[1], comfy: comfy[1], log: () => out });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', (d) => { out += d; });
    // Before the URL: the start failed. After it: the demo died under the test (a sanitizer's
    // report, a crash), and what it printed is what explains the failures that follow.
    child.on('exit', (code, signal) => {
      const why = `vramd demo exited (${code ?? signal})`;
      console.log(`${why}; its last output:\n${out.slice(-12000)}`);
      reject(new Error(why));
    });
    // Not left behind when the test ends early; --duration bounds it when the test is killed.
    process.on('exit', () => child.kill('SIGTERM'));
  });
}

async function checkHeaders(base) {
  const index = await fetch(base);
  check(index.status === 200, `GET / answers 200 (got ${index.status})`);
  const csp = index.headers.get('content-security-policy') || '';
  check(/default-src 'self'/.test(csp) && !/unsafe-inline/.test(csp), `GET / has a strict Content-Security-Policy (${csp})`);
  check(index.headers.get('x-content-type-options') === 'nosniff', 'GET / has X-Content-Type-Options: nosniff');
  const missing = await fetch(new URL('/assets/nope.js', base));
  const body = await missing.json().catch(() => null);
  check(missing.status === 404 && body && body.error && body.error.code === 'not_found',
        `GET /assets/nope.js answers 404 JSON (got ${missing.status})`);
}

// Console errors, but for the 401s the dashboard gets (and answers with its token form) before
// it has the token, and the failed requests while the test holds the browser offline.
function watchConsole(page, errors, label, tokenEnforced) {
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (tokenEnforced && /status of 401/.test(m.text())) return;
    if (/ERR_INTERNET_DISCONNECTED/.test(m.text())) return;  // the test's own offline spell
    if ((m.location().url || '').includes('/v1/services/ollama/unload')) return;  // the staged 409
    errors.push(`${label}: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`${label}: uncaught ${e.message}`));
}

// The request path: Chromium opens ComfyUI's WebSocket through vramd's proxy for ComfyUI (the
// fake speaks ComfyUI's /ws: `status` with our clientId at once, `feature_flags` answered); a
// chat request goes through the front door; the dashboard lists the front door's models and
// counts each service's requests.
async function checkRequestPath(page, demo) {
  // From a page of ComfyUI's own origin (through the proxy), as ComfyUI's frontend does; the
  // dashboard's CSP (connect-src 'self') rightly forbids it from the dashboard.
  const comfyPage = await page.context().newPage();
  await comfyPage.goto(demo.comfy + '/queue');
  const ws = await comfyPage.evaluate((base) => new Promise((resolve) => {
    const got = [];
    const sock = new WebSocket(base.replace('http://', 'ws://') + '/ws?clientId=browser-test');
    const done = (why) => { try { sock.close(); } catch (e) { /* closed */ } resolve({ why, got }); };
    sock.onopen = () => sock.send(JSON.stringify({ type: 'feature_flags', data: { supports_preview_metadata: true } }));
    sock.onmessage = (e) => { got.push(JSON.parse(e.data)); if (got.length === 2) done('two messages'); };
    sock.onerror = () => done('error');
    setTimeout(() => done('timeout'), 10000);
  }), demo.comfy);
  await comfyPage.close();
  const status = ws.got.find((m) => m.type === 'status');
  check(status && status.data.sid === 'browser-test',
        `Chromium's WebSocket through the ComfyUI proxy gets ComfyUI's status with our clientId (${ws.why}: ${JSON.stringify(ws.got)})`);
  check(ws.got.some((m) => m.type === 'feature_flags'), 'and its message reaches ComfyUI, which answers feature_flags');

  const chat = await fetch(demo.front + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
  });
  const answer = await chat.json().catch(() => null);
  check(chat.status === 200 && answer && answer.choices && answer.model === 'llama3.1:8b',
        `a chat completion through the front door (alias gpt-4o-mini) is answered by Ollama (${chat.status})`);

  await page.waitForSelector('#proxy-panel:not([hidden]) #proxy-models tr[data-model="llama3.1:8b"][data-service="ollama"]', { timeout: 10000 }).catch(() => {});
  check(await page.locator('#proxy-models tr[data-model="llama3.1:8b"][data-service="ollama"]').count() === 1 &&
        await page.locator('#proxy-models tr[data-model="gpt-4o-mini"][data-alias="llama3.1:8b"]').count() === 1,
        'the Request path panel lists the front door\'s model and its alias');
  check(/\/v1/.test(await page.locator('#proxy .front-door').innerText()), 'the panel shows the front door\'s URL');
  await page.waitForSelector('.service[data-service="ollama"] [data-requests="1"]', { timeout: 10000 }).catch(() => {});
  const ollamaText = await page.locator('.service[data-service="ollama"]').innerText();
  check(/1 request\b/.test(ollamaText), `the ollama card counts the request through the front door (${ollamaText.replace(/\s+/g, ' ').slice(0, 160)})`);
  await page.waitForSelector('.service[data-service="comfyui"] [data-requests]', { timeout: 10000 }).catch(() => {});
  check(/via http:\/\/127\.0\.0\.1:\d+/.test(await page.locator('.service[data-service="comfyui"]').innerText()),
        'the comfyui card names the proxy its requests come through');
}

async function main() {
  fs.mkdirSync(shots, { recursive: true });
  let demo = null;
  let base = args.url;
  if (!base) {
    if (!args.vramd) throw new Error('--vramd or --url is required');
    demo = await startDemo(args.vramd);
    base = demo.url;
  }
  console.log(`dashboard at ${base}`);
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    // --no-sandbox: CI runs as root, where chromium's sandbox refuses to start.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const errors = [];
  try {
    await checkHeaders(base);
    const probe = await fetch(new URL('/v1/status', base));
    const tokenEnforced = probe.status === 401;
    if (!args.url && !tokenEnforced)
      console.log(`note: this vramd answers /v1/status without the token (${probe.status}): the token form is not exercised`);

    // Desktop.
    const desktop = await browser.newContext({ viewport: { width: 1366, height: 900 } });
    const page = await desktop.newPage();
    watchConsole(page, errors, 'desktop', tokenEnforced);
    await page.goto(base, { waitUntil: 'load' });
    if (tokenEnforced) {
      await page.waitForSelector('#token-form:not([hidden])', { timeout: 10000 });
      check(true, 'a 401 brings up the token form');
      await page.screenshot({ path: path.join(shots, 'token-form.png') });
      await page.fill('#token-input', 'wrong-token');
      await page.click('#token-form button[type="submit"]');
      await page.waitForSelector('#token-error:not([hidden])', { timeout: 10000 });
      check(/refused/.test(await page.locator('#token-error').innerText()), 'a wrong token is refused, saying so');
      await page.fill('#token-input', TOKEN);
      await page.click('#token-form button[type="submit"]');
    }
    await page.waitForSelector('.service[data-service="comfyui"]', { timeout: 20000 });
    await page.waitForSelector('#live[data-state="on"]', { timeout: 20000 });
    // The chart has drawn the owners once a history with comfyui arrived.
    await page.waitForFunction(() => {
      const c = document.querySelector('.chart[data-gpu="0"]');
      return c && (c.dataset.owners || '').includes('comfyui') && c.querySelector('canvas');
    }, null, { timeout: 20000 });
    const legend = await page.locator('.chart[data-gpu="0"] .u-legend').innerText();
    for (const owner of ['comfyui', 'ollama', 'baseline', 'capacity'])
      check(legend.includes(owner), `chart legend names ${owner}`);
    const owners = await page.locator('.chart[data-gpu="0"]').getAttribute('data-owners');
    check(owners.startsWith('baseline,comfyui,ollama'), `chart stacks baseline, comfyui, ollama (${owners})`);

    for (const name of ['comfyui', 'ollama', 'whisper'])
      check(await page.locator(`.service[data-service="${name}"]`).count() === 1, `service card for ${name}`);
    // One host (the demo's SQLite store): no host switcher, the page as it always was.
    check(await page.locator('#host-switch').isHidden() && await page.locator('#cluster-view').isHidden() &&
          !/\(this host\)/.test(await page.locator('#host').innerText()),
          'with one host there is no host switcher nor overview');
    // speaches is in no config: the demo's [daemon] discover finds it (every 5 s) and says so.
    // Its card can come a sample before its bytes do (its port is read from the next sample on).
    await page.waitForFunction(() => /1\.0 GiB/.test((document.querySelector('.service[data-service="speaches"]') || {}).innerText || ''),
                               null, { timeout: 20000 }).catch(() => {});
    const speachesText = (await page.locator('.service[data-service="speaches"]').count()) === 1
      ? await page.locator('.service[data-service="speaches"]').innerText() : '';
    check(/discovered/.test(speachesText) && /1\.0 GiB/.test(speachesText),
          `the discovered speaches has a card that says so, with its 1.0 GiB (${speachesText.replace(/\s+/g, ' ').slice(0, 120)})`);
    if (tokenEnforced) {
      check(await page.locator('#token-form').isHidden(), 'the token form goes away with the right token');
      check(await page.evaluate(() => localStorage.getItem('vramd.token')) === TOKEN, 'the token is kept in localStorage');
    }
    const whisperText = await page.locator('.service[data-service="whisper"]').innerText();
    check(/process (running|starting|backoff|crashed|stopped)/.test(whisperText), 'whisper card shows its process state');
    // Only the actions a service has: whisper (kind "process") has no unload API, comfyui has.
    const whisperCard = page.locator('.service[data-service="whisper"]');
    check(await whisperCard.locator('button[data-action="unload"]').count() === 0 &&
          await whisperCard.locator('button[data-action="stop"]').count() === 1,
          'a process-kind service offers no Unload, but Stop');
    check(await page.locator('.service[data-service="comfyui"] button[data-action="unload"]').count() === 1,
          'comfyui offers Unload');

    if (demo) await checkRequestPath(page, demo);

    const comfyRow = page.locator('.gpu[data-gpu="0"] tr[data-owner="comfyui"]');
    const comfyBefore = Number(await comfyRow.getAttribute('data-bytes'));
    check(Math.abs(comfyBefore - 16 * GiB) < 0.5 * GiB, `holdings: comfyui holds 16 GiB (${(comfyBefore / GiB).toFixed(2)} GiB)`);
    check(/process/.test(await comfyRow.innerText()), 'holdings: comfyui row names its source');
    const chartBefore = Number(await page.locator('.chart[data-gpu="0"]').getAttribute('data-last-used-bytes'));
    await page.screenshot({ path: path.join(shots, 'desktop.png'), fullPage: true });

    // Unload the idle comfyui: the inline confirmation, then the verdict.
    const card = page.locator('.service[data-service="comfyui"]');
    await card.locator('button[data-action="unload"]').click();
    const confirm = card.locator('button[data-confirm="unload"]');
    check(await confirm.isVisible(), 'Unload asks for confirmation');
    await confirm.click();
    await page.waitForSelector('#events li[data-type^="unload."][data-subject="comfyui"]:not([data-type="unload.started"])', { timeout: 30000 });
    const verdict = await page.locator('#events li[data-type^="unload."][data-subject="comfyui"]:not([data-type="unload.started"])').first().getAttribute('data-type');
    check(verdict === 'unload.freed', `event feed shows the unload verdict (${verdict})`);
    check(await page.locator('#events li[data-type="unload.started"][data-subject="comfyui"]').count() >= 1, 'event feed shows unload.started');

    // Holdings: comfyui's row drops to (almost) nothing.
    await page.waitForFunction(() => {
      const r = document.querySelector('.gpu[data-gpu="0"] tr[data-owner="comfyui"]');
      return !r || Number(r.dataset.bytes) < 1024 ** 3;
    }, null, { timeout: 15000 }).catch(() => {});
    const after = await comfyRow.count() ? Number(await comfyRow.getAttribute('data-bytes')) : 0;
    check(after < GiB, `holdings: comfyui holds ${(after / GiB).toFixed(2)} GiB after the unload`);
    // Chart: the newest point is ~16 GiB lower (a 1.2 GiB batch job comes and goes meanwhile).
    await page.waitForFunction((before) => {
      const c = document.querySelector('.chart[data-gpu="0"]');
      return before - Number(c.dataset.lastUsedBytes) > 14 * 1024 ** 3;
    }, chartBefore, { timeout: 20000 }).catch(() => {});
    const chartAfter = Number(await page.locator('.chart[data-gpu="0"]').getAttribute('data-last-used-bytes'));
    const drop = (chartBefore - chartAfter) / GiB;
    check(drop > 14 && drop < 18, `chart: used memory dropped by ${drop.toFixed(2)} GiB`);
    const cardText = await card.innerText();
    check(/16\.0 GiB → /.test(cardText) && /freed/.test(cardText), 'comfyui card shows the last unload, before → after');
    // Asleep now: its depth on the card, what it keeps, and its expected wake per depth.
    await page.waitForSelector('.service[data-service="comfyui"] [data-asleep]', { timeout: 15000 }).catch(() => {});
    const asleep = await card.locator('[data-asleep]').getAttribute('data-asleep').catch(() => null);
    check(asleep === 'sleep1' || asleep === 'sleep2', `comfyui card says it is asleep, and at which depth (${asleep})`);
    const wakeText = await card.locator('[data-wake]').innerText().catch(() => '');
    check(/from RAM ~\d/.test(wakeText) && /reload ~\d/.test(wakeText), `comfyui card shows its expected wakes (${wakeText})`);

    // A failed action shows the API's message on the card (the daemon's answer staged: a real
    // failure would also change the demo's state).
    await page.route('**/v1/services/ollama/unload', (route) => route.fulfill({
      status: 409, contentType: 'application/json',
      body: JSON.stringify({ error: { code: 'failed', message: 'staged failure: ollama said no' } }),
    }));
    const ollama = page.locator('.service[data-service="ollama"]');
    await ollama.locator('button[data-action="unload"]').click();
    await ollama.locator('button[data-cancel="unload"]').click();
    check(await ollama.locator('button[data-confirm="unload"]').count() === 0, 'Cancel closes the confirmation without acting');
    await ollama.locator('button[data-action="unload"]').click();
    await ollama.locator('button[data-confirm="unload"]').click();
    await ollama.locator('.error', { hasText: 'staged failure: ollama said no' }).waitFor({ timeout: 10000 }).catch(() => {});
    check(/staged failure: ollama said no/.test(await ollama.innerText()), 'a failed action shows the API\'s error message');
    await page.unroute('**/v1/services/ollama/unload');

    // The feed survives a dropped connection and misses nothing: offline for a while (the demo's
    // batch job and whisper make events meanwhile), then back, resuming after the last id seen.
    await desktop.setOffline(true);
    await page.evaluate(() => window.vramdDashboard.dropStream());
    await page.waitForSelector('#live:not([data-state="on"])', { timeout: 10000 });
    const lastBefore = await page.evaluate(() => window.vramdDashboard.state.lastEventId);
    await page.waitForTimeout(12000);
    await desktop.setOffline(false);
    await page.waitForSelector('#live[data-state="on"]', { timeout: 30000 });
    await page.waitForFunction((n) => window.vramdDashboard.state.lastEventId > n, lastBefore, { timeout: 30000 }).catch(() => {});
    const ids = await page.$$eval('#events li', (lis) => lis.map((li) => Number(li.dataset.id)).sort((a, b) => a - b));
    const missing = [];
    for (let i = 1; i < ids.length; i++) for (let k = ids[i - 1] + 1; k < ids[i]; k++) missing.push(k);
    check(ids[ids.length - 1] > lastBefore && missing.length === 0,
          `after a dropped stream the feed resumed from event ${lastBefore} with no gap (now up to ${ids[ids.length - 1]}${missing.length ? ', missing ' + missing.join(',') : ''})`);

    // A lease shows in the queue panel (2 GiB fits without evicting anyone).
    const auth = tokenEnforced ? { Authorization: `Bearer ${TOKEN}` } : {};
    const lease = await fetch(new URL('/v1/leases', base), {
      method: 'POST', headers: Object.assign({ 'Content-Type': 'application/json' }, auth),
      body: JSON.stringify({ vram: '2GiB', label: 'browser-test', holder: 'dashboard.test', command: 'python3 embed.py' }),
    });
    check(lease.ok, `POST /v1/leases granted a 2 GiB lease (${lease.status})`);
    await page.waitForSelector('#leases tr[data-state="granted"]', { timeout: 10000 }).catch(() => {});
    check(/browser-test/.test(await page.locator('#leases').innerText()), 'the lease panel lists the lease');

    // A suspended preemptible lease (docs/api.md "Preemptible leases"): the demo has no
    // cuda-checkpoint, so the daemon's own answer is staged with that lease suspended, as
    // tests/integration/suspend_e2e_test.cc gets it from a real daemon and the fake utility.
    await page.route('**/v1/leases', async (route) => {
      const real = await route.fetch();
      const body = await real.json();
      for (const l of body.leases || []) {
        if (l.label !== 'browser-test') continue;
        Object.assign(l, { state: 'suspended', preemptible: true, suspension: 'suspended',
          suspended_at: new Date(Date.now() - 90000).toISOString(), suspended_for: "ollama's request",
          suspended_bytes: 2 * GiB });
      }
      await route.fulfill({ response: real, json: body });
    });
    await page.waitForSelector('#leases tr[data-state="suspended"]', { timeout: 15000 }).catch(() => {});
    const suspendedRow = await page.locator('#leases tr[data-state="suspended"]').innerText().catch(() => '');
    check(/suspended at \d{1,2}:\d{2}.* for ollama's request: 2\.0 GiB in host RAM/.test(suspendedRow) &&
          /preemptible/.test(suspendedRow),
          `a suspended lease says since when, for whom and what host RAM holds (${suspendedRow.replace(/\s+/g, ' ')})`);
    await page.locator('#leases').screenshot({ path: path.join(shots, 'desktop-suspended-lease.png') }).catch(() => {});
    await page.unroute('**/v1/leases');

    // The window selector redraws the chart.
    await page.locator('#window-select button[data-window="1h"]').click();
    await page.waitForTimeout(1000);
    check(await page.locator('.chart[data-gpu="0"] canvas').count() === 1, 'chart redrawn for 1 h');
    await page.locator('#window-select button[data-window="15m"]').click();
    // Let whisper crash once, so the diagnoses have something to show.
    await page.waitForSelector('#doctor .crash', { timeout: 35000 }).catch(() => {});
    check(await page.locator('#doctor .diag[data-service="whisper"]').count() === 1, 'crash diagnoses list whisper');
    await page.waitForTimeout(1500);
    await page.screenshot({ path: path.join(shots, 'desktop-after-unload.png'), fullPage: true });

    // Phone width: nothing wider than the screen.
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    // A returning visitor: the token is already in localStorage, so no 401 and no form.
    await phone.addInitScript((t) => localStorage.setItem('vramd.token', t), TOKEN);
    const ppage = await phone.newPage();
    watchConsole(ppage, errors, 'phone', false);
    await ppage.goto(base, { waitUntil: 'load' });
    await ppage.waitForSelector('.service[data-service="comfyui"]', { timeout: 20000 });
    await ppage.waitForFunction(() => document.querySelector('.chart canvas'), null, { timeout: 20000 });
    await ppage.waitForSelector('#live[data-state="on"]', { timeout: 20000 });
    await ppage.waitForSelector('#doctor .diag', { timeout: 20000 });
    await ppage.waitForTimeout(500);
    const overflow = await ppage.evaluate(() => {
      const vw = document.documentElement.clientWidth;
      const wide = [];
      for (const e of document.querySelectorAll('body *')) {
        const r = e.getBoundingClientRect();
        if (r.width && r.right > vw + 1 && !e.closest('.table-wrap, .events')) wide.push(`${e.tagName.toLowerCase()}.${e.className} right=${Math.round(r.right)}`);
      }
      return { vw, scroll: document.documentElement.scrollWidth, wide: wide.slice(0, 5) };
    });
    check(overflow.scroll <= overflow.vw && overflow.wide.length === 0,
          `phone (390 px): no horizontal overflow (scrollWidth ${overflow.scroll}, viewport ${overflow.vw}${overflow.wide.length ? ', too wide: ' + overflow.wide.join('; ') : ''})`);
    await ppage.screenshot({ path: path.join(shots, 'phone.png'), fullPage: true });

    check(errors.length === 0, `no console errors${errors.length ? ':\n  ' + errors.join('\n  ') : ''}`);
  } finally {
    await browser.close();
    if (demo) {
      demo.child.removeAllListeners('exit');
      demo.child.kill('SIGTERM');
    }
  }
  console.log(`screenshots in ${shots}`);
  if (failures) {
    if (demo) console.log('--- vramd demo output ---\n' + demo.log().slice(-4000));
    console.log(`${failures} check(s) failed`);
    process.exit(1);
  }
  console.log('all checks passed');
}

main().catch((e) => {
  console.error(`FAIL ${e.stack || e}`);
  process.exit(1);
});
