// Browser test of the durations history in the dashboard (docs/history.md): a ComfyUI service's
// card shows its version, the last change of it and its last durations; its History button opens
// the history view, whose chart has a dot per run and a line where the version changed. Against
// a vramd that is already running (no token) with a service "comfy" that has run prompts on two
// versions, in Debian's chromium through playwright-core:
//   node history.test.mjs --url URL --expect FILE --node-modules DIR --chromium PATH --screenshots DIR
// FILE (JSON): {"version": "0.28.0", "change": "0.27.0 → 0.28.0", "points": N, "markers": M}:
// the version now, a part of the last change's text, the runs of the newest workflow with a
// duration, and the version changes inside their time range. "service" names another service.
// Exit 0: passed; 1: failed; 77: skipped (chromium is not installed).
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

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
if (!args.url || !args.expect) {
  console.error('usage: node history.test.mjs --url URL --expect FILE.json [--node-modules DIR] [--chromium PATH] [--screenshots DIR]');
  process.exit(1);
}
const require = createRequire(path.join(path.resolve(args['node-modules'] || 'node_modules'), 'x.js'));
const { chromium } = require('playwright-core');
const expect = JSON.parse(fs.readFileSync(args.expect, 'utf8'));
const service = expect.service || 'comfy';

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
  return ok;
}

async function run(page) {
  const card = page.locator(`#services .service[data-service="${service}"]`);
  await page.waitForSelector(`#services .service[data-service="${service}"]`, { timeout: 20000 });

  // Version, and the last change under it.
  await page.waitForSelector(`#services .service[data-service="${service}"] [data-version="${expect.version}"]`, { timeout: 15000 }).catch(() => {});
  const version = card.locator('[data-version]');
  const versionText = (await version.count()) ? await version.innerText() : '';
  check(await version.getAttribute('data-version').catch(() => null) === expect.version && versionText.startsWith(expect.version),
        `${service}'s card shows version ${expect.version} (${versionText.replace(/\s+/g, ' ') || 'no Version fact'})`);
  const change = version.locator('.sub');
  const changeText = (await change.count()) ? await change.innerText() : '';
  check(/^changed .* ago: /.test(changeText) && changeText.includes(expect.change),
        `under it, the last change: "${changeText}" has "${expect.change}"`);

  // Its last durations (fetched after the card, so wait for them).
  await page.waitForSelector(`#services .service[data-service="${service}"] [data-durations]`, { timeout: 20000 }).catch(() => {});
  const durations = card.locator('[data-durations]');
  const n = (await durations.count()) ? Number(await durations.getAttribute('data-durations')) : 0;
  const durationsText = n ? (await durations.innerText()).replace(/\s+/g, ' ') : '';
  check(n >= 1 && n <= 5 && /\d s/.test(durationsText) && /\(prompts\)/.test(durationsText),
        `the Durations fact lists ${n} of its last runs (${durationsText})`);
  check(await card.locator('dt', { hasText: 'Durations' }).count() === 1, 'under the label Durations');

  // The history view.
  const button = card.locator('button[data-history]');
  if (!check(await button.count() === 1, 'the card offers History')) return;
  await button.click();
  await page.waitForSelector(`#history-view:not([hidden])[data-service="${service}"][data-state="ready"] #history-svg`, { timeout: 15000 });
  const svg = page.locator('#history-svg');
  const points = Number(await svg.getAttribute('data-points'));
  const markers = Number(await svg.getAttribute('data-markers'));
  const dots = await svg.locator('circle.hv-dot').count();
  const lines = await svg.locator('g.hv-marker').count();
  check(points === expect.points && dots === points, `the chart has a dot per run: ${points} (${dots} drawn), expected ${expect.points}`);
  check(markers === expect.markers && lines === markers, `and ${markers} version change line(s) (${lines} drawn), expected ${expect.markers}`);
  if (expect.markers > 0) {
    const labels = await svg.locator('g.hv-marker text').allTextContents();
    check(labels.includes(expect.version), `a change line is labelled ${expect.version} (${labels.join(', ')})`);
  }
  const subjects = await page.locator('#history-subject option').count();
  check(subjects >= 1 && await page.locator('#history-subject').inputValue() === await svg.getAttribute('data-subject'),
        `the picker offers ${subjects} workflow(s), the drawn one chosen`);
  const rows = await page.$$eval('#history-table tbody tr', (rs) => rs.map((r) => ({ variant: r.dataset.variant, count: Number(r.dataset.count), text: r.innerText })));
  check(rows.some((r) => r.variant === expect.version && r.count >= 1), `the table has a row for ${expect.version} (${rows.map((r) => r.text.replace(/\s+/g, ' ')).join(' | ')})`);
  if (expect.markers > 0) check(rows.length >= 2 && rows.slice(1).some((r) => /%/.test(r.text)), 'and the change of p50 against the version before');
  // From the top: a full-page shot of a scrolled page draws the sticky top bar midway.
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: path.join(shots, 'history.png'), fullPage: true });

  // By arguments: the same runs, lines only where the arguments changed.
  await page.click('#history-by button[data-by="args"]');
  await page.waitForSelector('#history-view[data-state="ready"] #history-svg[data-by="args"]', { timeout: 10000 });
  check(Number(await page.locator('#history-svg').getAttribute('data-points')) === points, 'by arguments: the same runs');
  await page.click('#history-by button[data-by="version"]');
  await page.click('#history-close');
  check(await page.locator('#history-view').isHidden(), 'Close hides the history view');
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
    await page.goto(args.url, { waitUntil: 'load' });
    await run(page);
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
