// Browser test of the dashboard's view of several hosts (issue 17): the host switcher, the
// all-hosts overview and another host's read-only view, in Debian's chromium through
// playwright-core, against real vramd daemons on one real PostgreSQL. The cluster is set up by
// the gtest ClusterViewE2E.TheDashboardShowsEveryHost (tests/integration/cluster_view_e2e_test.cc),
// which runs this twice:
//   node cluster.test.mjs --phase up   --expect FILE --node-modules DIR --chromium PATH --screenshots DIR
//   node cluster.test.mjs --phase lost --expect FILE ...   (after it killed one host)
// FILE (JSON): {"local": url of the host whose dashboard is opened, "hosts": {name: {"services":
// [names], "granted": n, "queued": n}}, "lost": name of the killed host (phase lost)}.
// Exit 0: passed; 1: failed; 77: skipped (chromium is not installed).
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const GiB = 1024 ** 3;

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
if (!fs.existsSync(chromiumPath)) {
  console.log(`SKIPPED: chromium is not installed (looked for ${chromiumPath})`);
  process.exit(77);
}
const require = createRequire(path.join(path.resolve(args['node-modules'] || 'node_modules'), 'x.js'));
const { chromium } = require('playwright-core');
const expect = JSON.parse(fs.readFileSync(args.expect, 'utf8'));
const names = Object.keys(expect.hosts).sort();

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
  return ok;
}

async function phaseUp(page, localName) {
  // The switcher: this host, All hosts, then each other host.
  await page.waitForSelector('#host-switch:not([hidden]) .host-tab', { timeout: 20000 });
  const tabs = await page.$$eval('#host-switch .host-tab', (as) => as.map((a) => a.dataset.view));
  const others = names.filter((n) => n !== localName);
  check(JSON.stringify(tabs) === JSON.stringify(['local', 'all', ...others]),
        `the switcher offers this host, All hosts and ${others.join(', ')} (${tabs.join(', ')})`);
  check(/this host/.test(await page.locator('#host-switch [data-view="local"]').innerText()), 'the local tab says it is this host');
  check(/\(this host\)/.test(await page.locator('#host').innerText()) &&
        (await page.locator('#host').innerText()).startsWith(localName), 'the top bar names this host');
  // This host's view is the dashboard as it is with one host: actions offered.
  const localService = expect.hosts[localName].services[0];
  await page.waitForSelector(`#local-view .service[data-service="${localService}"] button[data-action="unload"]`, { timeout: 20000 });
  check(true, `this host's ${localService} offers Unload`);

  // All hosts: one card per host with its GPU, services and lease counts.
  await page.click('#host-switch [data-view="all"]');
  await page.waitForSelector('#cluster-view:not([hidden]) #host-cards .host-card', { timeout: 10000 });
  check(await page.locator('#local-view').isHidden(), 'the overview replaces this host\'s view');
  const wantCounts = (n) => `${expect.hosts[n].granted} granted · ${expect.hosts[n].queued} queued`;
  await page.waitForFunction((want) => want.every(([n, text]) => {
    const c = document.querySelector(`.host-card[data-host="${n}"] .host-leases`);
    return c && c.textContent === text;
  }), names.map((n) => [n, wantCounts(n)]), { timeout: 15000 }).catch(() => {});
  const cards = await page.$$eval('#host-cards .host-card', (cs) => cs.map((c) => c.dataset.host));
  check(JSON.stringify(cards) === JSON.stringify(names), `the overview has a card per host (${cards.join(', ')})`);
  for (const n of names) {
    const card = page.locator(`.host-card[data-host="${n}"]`);
    check(await card.getAttribute('data-state') === 'up' && /heartbeat \d+ s ago/.test(await card.innerText()), `${n}: up, with its heartbeat's age`);
    const gpu = card.locator('.host-gpu[data-gpu="0"]');
    check(await gpu.count() === 1 && Number(await gpu.getAttribute('data-total-bytes')) === 24 * GiB &&
          /used of 24\.0 GiB/.test(await gpu.innerText()) && await gpu.locator('.usage span').count() >= 1,
          `${n}: GPU 0 with its used/total bar`);
    for (const s of expect.hosts[n].services) {
      const row = card.locator(`.host-services tr[data-service="${s}"]`);
      check(await row.count() === 1 && Number(await row.getAttribute('data-bytes')) > GiB &&
            await row.getAttribute('data-state') !== 'unknown',
            `${n}: service ${s} with its state and bytes (${await row.count() ? (await row.innerText()).replace(/\s+/g, ' ') : 'missing'})`);
    }
    check(await card.locator('.host-leases').innerText() === wantCounts(n), `${n}: ${wantCounts(n)}`);
  }
  // Every host's leases, each under its host (GET /v1/leases?host=all, fetched after the switch).
  await page.waitForFunction((want) => want.every(([n, k]) => document.querySelectorAll(`#all-leases tr[data-host="${n}"]`).length === k),
    names.map((n) => [n, expect.hosts[n].granted + expect.hosts[n].queued]), { timeout: 10000 }).catch(() => {});
  for (const n of names) {
    const want = expect.hosts[n].granted + expect.hosts[n].queued;
    check(await page.locator(`#all-leases tr[data-host="${n}"]`).count() === want, `the leases of every host list ${want} of ${n}`);
  }
  check(await page.locator('#cluster-view button[data-action]').count() === 0, 'the overview offers no actions');
  await page.screenshot({ path: path.join(shots, 'cluster-overview.png'), fullPage: true });

  // Another host: its snapshot, read-only.
  const other = others[0];
  await page.click(`.host-card[data-host="${other}"] a.btn`);
  const otherService = expect.hosts[other].services[0];
  await page.waitForSelector(`#remote-services .service[data-service="${otherService}"]`, { timeout: 10000 });
  check(new URL(page.url()).hash === `#host=${other}`, `View on ${other}'s card opens #host=${other}`);
  check(await page.locator(`#host-switch [data-view="${other}"]`).getAttribute('aria-current') === 'page', `the ${other} tab is the current one`);
  for (const s of expect.hosts[other].services)
    check(await page.locator(`#remote-services .service[data-service="${s}"]`).count() === 1, `${other}'s view shows its service ${s}`);
  check(await page.locator(`#remote-services .service[data-service="${localService}"]`).count() === 0, `and not this host's ${localService}`);
  check(await page.locator('#cluster-view button[data-action]').count() === 0, `no Unload, Start, Stop or Restart offered for ${other}`);
  check(await page.locator(`#remote-services [data-readonly="${other}"]`).count() === expect.hosts[other].services.length,
        'each of its services says its actions are on that host\'s own API');
  const note = await page.locator('#readonly-note').innerText();
  check(/Read-only/.test(note) && note.includes(localName), `a note says the view is read-only and actions act on ${localName} (${note})`);
  const gpu = page.locator('#remote-gpus .gpu[data-gpu="0"]');
  check(await gpu.count() === 1 && await gpu.locator('.chart').count() === 0 &&
        await gpu.locator(`tr[data-owner="${otherService}"]`).count() === 1,
        `${other}'s GPU card shows its holdings (${otherService}), without a chart`);
  const want = expect.hosts[other].granted + expect.hosts[other].queued;
  await page.waitForFunction((n) => document.querySelectorAll('#remote-leases tr[data-lease]').length === n, want, { timeout: 10000 }).catch(() => {});
  check(await page.locator('#remote-leases tr[data-lease]').count() === want, `${other}'s leases: ${want}`);
  await page.screenshot({ path: path.join(shots, 'cluster-remote-host.png'), fullPage: true });

  // Back to this host: its actions again.
  await page.click('#host-switch [data-view="local"]');
  await page.waitForSelector('#local-view:not([hidden])', { timeout: 10000 });
  check(await page.locator(`#local-view .service[data-service="${localService}"] button[data-action="unload"]`).count() === 1,
        'back on this host, its actions are offered again');
}

async function phaseLost(page) {
  const lost = expect.lost;
  await page.waitForSelector(`.host-card[data-host="${lost}"]`, { timeout: 20000 });
  await page.waitForSelector(`.host-card[data-host="${lost}"][data-state="lost"]`, { timeout: 20000 }).catch(() => {});
  const card = page.locator(`.host-card[data-host="${lost}"]`);
  const text = await card.innerText();
  check(await card.getAttribute('data-state') === 'lost' && /lost: no heartbeat for/.test(text),
        `${lost} shows as lost after host_timeout (${text.replace(/\s+/g, ' ').slice(0, 100)})`);
  for (const s of expect.hosts[lost].services)
    check(await card.locator(`tr[data-service="${s}"]`).getAttribute('data-state') === 'unknown', `${lost}'s ${s} reads unknown`);
  check(await page.locator(`#host-switch [data-view="${lost}"]`).getAttribute('data-state') === 'lost' &&
        /lost/.test(await page.locator(`#host-switch [data-view="${lost}"]`).innerText()), `the ${lost} tab says lost`);
  for (const n of names.filter((x) => x !== lost))
    check(await page.locator(`.host-card[data-host="${n}"]`).getAttribute('data-state') === 'up', `${n} is still up`);
  // Its leases went to live hosts (re-queued there): its card counts none, the table lists none
  // under it, and every one of them is still listed once.
  const total = names.reduce((n, x) => n + expect.hosts[x].granted + expect.hosts[x].queued, 0);
  await page.waitForFunction(([l, t]) => document.querySelectorAll(`#all-leases tr[data-host="${l}"]`).length === 0 &&
    document.querySelectorAll('#all-leases tr[data-lease]').length === t, [lost, total], { timeout: 15000 }).catch(() => {});
  check(await card.locator('.host-leases').innerText() === '0 granted · 0 queued', `${lost}'s card counts none of the leases it held`);
  const hosts = await page.$$eval('#all-leases tr[data-lease]', (rs) => rs.map((r) => r.dataset.host));
  check(hosts.length === total && !hosts.includes(lost), `its ${total} leases are listed under live hosts (${hosts.join(', ')})`);
  await page.screenshot({ path: path.join(shots, 'cluster-host-lost.png'), fullPage: true });
  await page.click(`#host-switch [data-view="${lost}"]`);
  await page.waitForSelector('#readonly-note[data-state="lost"]', { timeout: 10000 }).catch(() => {});
  check(/lost: no heartbeat/.test(await page.locator('#readonly-note').innerText()), `${lost}'s own view says it is lost`);
}

// The overview at phone width: nothing wider than the screen.
async function phoneOverview(browser) {
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  const page = await phone.newPage();
  await page.goto(new URL('/#all-hosts', expect.local).href, { waitUntil: 'load' });
  await page.waitForSelector('#host-cards .host-card', { timeout: 20000 });
  await page.waitForTimeout(500);
  const overflow = await page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const wide = [];
    for (const e of document.querySelectorAll('body *')) {
      const r = e.getBoundingClientRect();
      if (r.width && r.right > vw + 1 && !e.closest('.table-wrap')) wide.push(`${e.tagName.toLowerCase()}.${e.className} right=${Math.round(r.right)}`);
    }
    return { vw, scroll: document.documentElement.scrollWidth, wide: wide.slice(0, 5) };
  });
  check(overflow.scroll <= overflow.vw && overflow.wide.length === 0,
        `phone (390 px): the overview has no horizontal overflow (scrollWidth ${overflow.scroll}${overflow.wide.length ? ', too wide: ' + overflow.wide.join('; ') : ''})`);
  await page.screenshot({ path: path.join(shots, 'cluster-phone.png'), fullPage: true });
  await phone.close();
}

async function main() {
  fs.mkdirSync(shots, { recursive: true });
  const browser = await chromium.launch({
    executablePath: chromiumPath, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const errors = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1366, height: 900 } });
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push(`uncaught ${e.message}`));
    const status = await (await fetch(new URL('/v1/status', expect.local))).json();
    if (args.phase === 'lost') {
      await page.goto(new URL('/#all-hosts', expect.local).href, { waitUntil: 'load' });
      await phaseLost(page);
      await phoneOverview(browser);
    } else {
      await page.goto(expect.local, { waitUntil: 'load' });
      await phaseUp(page, status.host);
    }
    check(errors.length === 0, `no console errors${errors.length ? ':\n  ' + errors.join('\n  ') : ''}`);
  } finally {
    await browser.close();
  }
  console.log(`screenshots in ${shots}`);
  if (failures) {
    console.log(`${failures} check(s) failed`);
    process.exit(1);
  }
  console.log('all checks passed');
}

main().catch((e) => {
  console.error(`FAIL ${e.stack || e}`);
  process.exit(1);
});
