// vramd dashboard: polls the JSON API, streams /v1/events, draws VRAM by owner with uPlot.
// Plain JS, no build step. Every request goes through api(), which adds the bearer token when the
// daemon asked for one (a 401), so the dashboard works with or without a token.
'use strict';

(function () {
  const TOKEN_KEY = 'vramd.token';
  const WINDOWS = { '15m': 15 * 60, '1h': 3600, '24h': 86400 };
  const MAX_EVENTS = 200;
  const GiB = 1024 ** 3;

  const state = {
    window: '15m',
    token: localStorage.getItem(TOKEN_KEY) || '',
    needToken: false,
    gpus: new Map(),      // index -> {root, refs, plot, owners}
    services: new Map(),  // name -> {root, refs, action}
    durations: new Map(), // name -> its last runs (GET /v1/history/records): {records, kind, at, due, key, loading, off}
    hv: null,             // the durations history view: {service, by, subject, groups, variants, records}
    lastEventId: 0,
    seenEvents: new Set(),
    status: null,
    serviceNames: [],     // in config order: their colours
    hosts: null,          // the last GET /v1/hosts (several hosts on one PostgreSQL store)
    view: 'local',        // 'local' (this host), 'all' (every host) or another host's name
    remote: null,         // that host's view: {host, gpus, services}
    viewLeases: null,     // GET /v1/leases?host=... for the view, or {error}
  };

  // ---- helpers ----

  const $ = (id) => document.getElementById(id);

  // el('div', {class: 'x', text: 'hi'}, child, ...): a DOM element; never parses HTML.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = v;
      else if (k === 'class') e.className = v;
      else if (k === 'style') e.style.cssText = v;  // CSSOM: allowed by the CSP, a style attribute is not
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function fmtBytes(b) {
    if (b === null || b === undefined) return '—';
    const a = Math.abs(b);
    if (a >= GiB) return (b / GiB).toFixed(1) + ' GiB';
    if (a >= 1024 ** 2) return Math.round(b / 1024 ** 2) + ' MiB';
    if (a >= 1024) return Math.round(b / 1024) + ' KiB';
    return b + ' B';
  }

  function fmtDuration(s) {
    if (s === null || s === undefined) return '—';
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min' + (s % 60 && s < 600 ? ' ' + (s % 60) + ' s' : '');
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  function ago(iso) {
    if (!iso) return '—';
    return fmtDuration((Date.now() - Date.parse(iso)) / 1000) + ' ago';
  }

  function clock(iso) {
    const d = new Date(iso);
    return isNaN(d) ? '' : d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  }

  const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

  // An axis label: 24-hour clock, seconds only when the ticks are less than a minute apart.
  function timeLabel(t, incr) {
    const d = new Date(t * 1000);
    const p = (n) => String(n).padStart(2, '0');
    return `${p(d.getHours())}:${p(d.getMinutes())}` + (incr < 60 ? `:${p(d.getSeconds())}` : '');
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // A colour per owner that is the same on every page load: services by their place in the
  // config (no two alike while there are five or fewer), other owners by a hash of the name.
  const SERVICE_COLORS = ['#5b8def', '#3fb68b', '#e5a13a', '#b07ce8', '#4fc1d6'];
  const OTHER_COLORS = ['#e0689a', '#9fc25a', '#d98b5f', '#7a8cf0', '#c9b458'];
  function ownerColor(name, kind) {
    if (kind === 'baseline' || name === 'baseline') return '#59616e';
    if (kind === 'unknown' || name === 'unknown') return '#e5534b';
    const i = state.serviceNames.indexOf(name);
    if (i >= 0) return SERVICE_COLORS[i % SERVICE_COLORS.length];
    // Others (batch jobs, containers): from a hash of the name, moved on to a colour no other
    // present owner has, so two python3 jobs side by side do not look like one.
    if (!otherColors.has(name)) {
      let h = 0;
      for (const ch of name) h = (h * 31 + ch.codePointAt(0)) >>> 0;
      const taken = new Set(otherColors.values());
      let c = OTHER_COLORS[h % OTHER_COLORS.length];
      for (let k = 1; taken.has(c) && k < OTHER_COLORS.length; k++) c = OTHER_COLORS[(h + k) % OTHER_COLORS.length];
      otherColors.set(name, c);
    }
    return otherColors.get(name);
  }
  const otherColors = new Map();
  // Owners no longer in the status nor any chart give their colours back.
  function forgetColors(present) {
    for (const name of otherColors.keys()) if (!present.has(name)) otherColors.delete(name);
  }
  function withAlpha(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
  }

  // ---- API ----

  class AuthNeeded extends Error {}

  function headers(extra) {
    const h = Object.assign({ Accept: 'application/json' }, extra || {});
    if (state.token) h.Authorization = 'Bearer ' + state.token;
    return h;
  }

  function errorText(body, res) {
    if (body && body.error && body.error.message) return body.error.message;
    if (body && body.message) return body.message;
    return `${res.status} ${res.statusText}`;
  }

  // GET or POST a JSON endpoint. Resolves with the parsed body on 2xx; throws Error(message from
  // the API) otherwise, AuthNeeded on 401 (after showing the token form).
  async function api(path, opts) {
    opts = opts || {};
    const res = await fetch(path, { method: opts.method || 'GET', headers: headers(), cache: 'no-store' });
    if (res.status === 401) {
      askToken(state.token ? 'That token was refused.' : '');
      throw new AuthNeeded('token needed');
    }
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) {
      const err = new Error(errorText(body, res));
      err.status = res.status;
      err.body = body;
      throw err;
    }
    return body;
  }

  function askToken(message) {
    state.needToken = true;
    $('token-form').hidden = false;
    $('token-error').hidden = !message;
    $('token-error').textContent = message || '';
    $('token-input').focus();
  }

  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.token = $('token-input').value.trim();
    if (state.token) localStorage.setItem(TOKEN_KEY, state.token);
    else localStorage.removeItem(TOKEN_KEY);
    state.needToken = false;
    $('token-form').hidden = true;
    $('token-input').value = '';
    connect();
  });

  function showBanner(text) {
    $('banner').hidden = !text;
    $('banner').textContent = text || '';
  }

  // ---- GPUs: usage, chart, holdings ----

  function renderGpus(status) {
    state.status = status;
    const b = status.backend ? `${status.backend}${status.driver_version ? ' · driver ' + status.driver_version : ''}` : '';
    const named = manyHosts() && status.host ? status.host + ' (this host)' : '';
    $('host').textContent = [named, location.host, b].filter(Boolean).join(' · ');
    const root = $('gpus');
    if (!status.gpus || status.gpus.length === 0) {
      root.replaceChildren(el('p', { class: 'empty', text: status.error ? 'No GPU: ' + status.error : 'No GPU found.' }));
      state.gpus.clear();
      return;
    }
    if (root.querySelector('.empty')) root.replaceChildren();
    const seen = new Set();
    for (const g of status.gpus) {
      seen.add(g.index);
      let gpu = state.gpus.get(g.index);
      if (!gpu) {
        gpu = makeGpu(g);
        state.gpus.set(g.index, gpu);
        root.append(gpu.root);
        loadHistory(gpu);
      }
      updateGpu(gpu, g);
    }
    for (const [i, gpu] of state.gpus) {
      if (!seen.has(i)) {
        if (gpu.plot) gpu.plot.destroy();
        gpu.root.remove();
        state.gpus.delete(i);
      }
    }
  }

  // `remote`: another host's GPU, from its snapshot: no chart (its history is that host's).
  function makeGpu(g, remote) {
    const refs = {
      title: el('h3'),
      meta: el('span', { class: 'gpu-meta' }),
      usage: el('div', { class: 'usage', role: 'img' }),
      usageText: el('div', { class: 'usage-text' }),
      chart: el('div', { class: 'chart', dataset: { gpu: g.index } }),
      note: el('div', { class: 'chart-note' }),
      holdings: el('tbody'),
    };
    const root = el('article', { class: 'gpu' + (g.parent !== null && g.parent !== undefined ? ' mig-instance' : ''), dataset: { gpu: g.index } },
      el('div', { class: 'gpu-head' }, refs.title, refs.meta),
      refs.usage, refs.usageText, remote ? null : refs.chart, refs.note,
      el('div', { class: 'table-wrap' },
        el('table', { class: 'holdings' },
          el('thead', {}, el('tr', {},
            el('th', { text: 'Owner' }), el('th', { class: 'num', text: 'Bytes' }),
            el('th', { text: 'Source' }), el('th', { class: 'hide-narrow', text: 'Since' }))),
          refs.holdings)));
    return { index: g.index, root, refs, plot: null, owners: [], history: null };
  }

  // "0/2" for a MIG instance, whose index is a large number (docs/api.md).
  function gpuLabel(index) {
    const g = state.gpus.get(index);
    return g && g.label ? g.label : String(index);
  }

  function updateGpu(gpu, g) {
    const r = gpu.refs;
    // A MIG instance is titled by its label (GPU/GI, as nvidia-smi numbers it) and profile.
    const label = g.label || String(g.index);
    gpu.label = label;
    r.title.textContent = g.parent !== null && g.parent !== undefined
      ? `GPU ${label} · MIG ${g.mig_profile || 'instance'} · ${g.uuid || ''}`
      : `GPU ${label} · ${g.name || 'unknown'}`;
    const bits = [];
    if (g.mig_enabled) bits.push('MIG on: memory is held in its instances');
    if (g.note) bits.push(g.note);
    if (g.utilization_pct !== null && g.utilization_pct !== undefined) bits.push(`util ${g.utilization_pct}%`);
    if (g.temperature_c !== null && g.temperature_c !== undefined) bits.push(`${g.temperature_c} °C`);
    if (g.power_w !== null && g.power_w !== undefined) bits.push(`${Math.round(g.power_w)} W`);
    if (g.health && g.health !== 'ok') bits.push(g.health + (g.error ? ': ' + g.error : ''));
    r.meta.textContent = bits.join(' · ');
    gpu.root.dataset.usedBytes = g.used_bytes;
    gpu.root.dataset.totalBytes = g.total_bytes;

    // Same order as the chart's stack: baseline first, then services, then the rest.
    const stackOrder = orderSeries(g.holdings || []);
    const segs = stackOrder.map((h) => el('span', {
      style: `width:${(100 * h.bytes / Math.max(1, g.total_bytes)).toFixed(2)}%;background:${ownerColor(h.owner, h.owner_kind)}`,
      title: `${h.owner}: ${fmtBytes(h.bytes)}`,
    }));
    r.usage.replaceChildren(...segs);
    r.usage.setAttribute('aria-label', `${fmtBytes(g.used_bytes)} used of ${fmtBytes(g.total_bytes)}`);
    const pct = g.total_bytes ? Math.round(100 * g.used_bytes / g.total_bytes) : 0;
    r.usageText.replaceChildren(
      el('strong', { text: fmtBytes(g.used_bytes) }), ` used of ${fmtBytes(g.total_bytes)} (${pct}%) · `,
      el('span', { text: `${fmtBytes(g.free_bytes)} free` }));

    const rows = (g.holdings || []).slice().sort((a, b) => b.bytes - a.bytes).map((h) => {
      const evidence = [];
      if (h.pids && h.pids.length) evidence.push('pid ' + h.pids.join(', '));
      if (h.candidates && h.candidates.length)
        evidence.push('candidates: ' + h.candidates.map((c) => `${c.name} (${c.pid})`).join(', '));
      return el('tr', { dataset: { owner: h.owner, bytes: h.bytes } },
        el('td', {},
          el('span', { class: 'swatch', style: `background:${ownerColor(h.owner, h.owner_kind)}` }),
          h.owner, ' ', el('span', { class: 'owner-kind', text: h.owner_kind }),
          evidence.length ? el('span', { class: 'sub', text: evidence.join(' · ') }) : null),
        el('td', { class: 'num', text: fmtBytes(h.bytes) }),
        el('td', {}, el('span', { class: 'source', text: h.source })),
        el('td', { class: 'hide-narrow muted', text: ago(h.since) }));
    });
    if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 4, class: 'muted', text: 'Nothing held.' })));
    r.holdings.replaceChildren(...rows);
    gpu.driverNote = g.per_process_available ? ''
      : 'Per-process memory is not available from this driver: owners come from residuals and self-reports.';
    updateNote(gpu);
  }

  function updateNote(gpu) {
    gpu.refs.note.textContent = [gpu.historyNote, gpu.driverNote].filter(Boolean).join(' ');
  }

  // Owners bottom-up: baseline first, then services, then the rest, by name within a kind.
  const KIND_ORDER = { baseline: 0, service: 1, lease: 2, container: 3, unit: 4, process: 5, unknown: 6 };
  function orderSeries(series) {
    return series.slice().sort((a, b) =>
      ((KIND_ORDER[a.owner_kind] ?? 9) - (KIND_ORDER[b.owner_kind] ?? 9)) || a.owner.localeCompare(b.owner));
  }

  async function loadHistory(gpu) {
    const width = Math.max(200, gpu.refs.chart.clientWidth || 600);
    const points = Math.min(600, Math.round(width / 2));
    try {
      const h = await api(`/v1/history?gpu=${gpu.index}&window=${state.window}&points=${points}`);
      drawChart(gpu, h);
    } catch (e) {
      if (!(e instanceof AuthNeeded)) { gpu.historyNote = 'History: ' + e.message; updateNote(gpu); }
    }
  }

  function drawChart(gpu, h) {
    const series = orderSeries(h.series || []);
    const times = h.times || [];
    const n = times.length;
    // Stack: row k holds the sum of owners 0..k; the legend shows each owner's own bytes.
    const raw = series.map((s) => s.bytes.map((v) => (v === null ? 0 : v)));
    const stacked = [];
    const acc = new Array(n).fill(0);
    for (const r of raw) stacked.push(r.map((v, i) => (acc[i] += v) / GiB));
    const total = (h.total_bytes || 0) / GiB;
    const capacity = new Array(n).fill(total);
    const data = [times, ...stacked, capacity];
    gpu.refs.chart.dataset.owners = series.map((s) => s.owner).join(',');
    gpu.refs.chart.dataset.lastUsedBytes = n ? Math.round(acc[n - 1]) : 0;
    gpu.history = { raw, series };
    gpu.historyNote = n && times[n - 1] - times[0] < WINDOWS[state.window] * 0.9
      ? `History since ${timeLabel(times[0], 60)} (${fmtDuration(times[n - 1] - times[0])}).` : '';
    updateNote(gpu);

    const key = series.map((s) => s.owner).join('\n') + '|' + state.window;
    if (gpu.plot && gpu.plotKey === key) {
      gpu.plot.setData(data);
      return;
    }
    if (gpu.plot) gpu.plot.destroy();
    gpu.plotKey = key;

    // The legend shows each owner's own bytes (not the stacked sum): at the cursor, else the latest.
    const rawValue = (si) => (u, v, sidx, idx) => {
      const hist = gpu.history;
      if (!hist || !hist.raw[si] || !hist.raw[si].length) return '—';
      const at = idx === null || idx === undefined ? hist.raw[si].length - 1 : idx;
      return fmtBytes(hist.raw[si][at]);
    };
    const uSeries = [{ label: 'time', value: (u, v) => (v === null ? 'now' : new Date(v * 1000).toLocaleTimeString([], { hour12: false })) }];
    const bands = [];
    series.forEach((s, i) => {
      const c = ownerColor(s.owner, s.owner_kind);
      // Each owner fills the band between its line and the one below (uPlot clips a series' fill
      // to its band), so the areas stack instead of overlapping.
      uSeries.push({ label: s.owner, stroke: c, width: 1, fill: withAlpha(c, 0.5), value: rawValue(i), points: { show: false } });
      if (i > 0) bands.push({ series: [i + 1, i] });
    });
    uSeries.push({ label: 'capacity', stroke: '#8b95a5', width: 1, dash: [4, 4], value: () => fmtBytes(h.total_bytes), points: { show: false } });

    const width = Math.max(200, gpu.refs.chart.clientWidth);
    const axis = { stroke: '#8b95a5', grid: { stroke: 'rgba(255,255,255,0.06)' }, ticks: { stroke: 'rgba(255,255,255,0.1)' }, font: '11px system-ui, sans-serif' };
    const opts = {
      width,
      height: width < 500 ? 170 : 220,
      series: uSeries,
      bands,
      cursor: { points: { show: false }, drag: { x: false, y: false } },
      legend: { live: true },
      scales: {
        // The window, or less when the history is shorter (the note under the chart says so).
        x: { time: true, range: (u, min, max) => { const end = max ?? Date.now() / 1000; return [Math.max(end - WINDOWS[state.window], Math.min(min ?? end, end - 60)), end]; } },
        y: { range: (u, min, max) => [0, Math.max(total, max) * 1.04 || 1] },
      },
      axes: [
        // Whole seconds at least: sub-second ticks repeated the same label.
        Object.assign({}, axis, { incrs: TIME_INCRS, values: (u, splits, ai, space, incr) => splits.map((t) => timeLabel(t, incr)) }),
        Object.assign({}, axis, { size: 52, values: (u, vals) => vals.map((v) => v + ' GiB') }),
      ],
    };
    gpu.plot = new uPlot(opts, data, gpu.refs.chart);
  }

  // Resize charts with their container.
  const resizer = new ResizeObserver(() => {
    for (const gpu of state.gpus.values()) {
      if (!gpu.plot) continue;
      const w = Math.max(200, gpu.refs.chart.clientWidth);
      if (Math.abs(w - gpu.plot.width) > 2) gpu.plot.setSize({ width: w, height: w < 500 ? 170 : 220 });
    }
  });
  resizer.observe(document.body);

  $('window-select').addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-window]');
    if (!b) return;
    state.window = b.dataset.window;
    for (const x of $('window-select').querySelectorAll('button')) x.setAttribute('aria-pressed', String(x === b));
    for (const gpu of state.gpus.values()) loadHistory(gpu);
  });

  // ---- services ----

  const STATE_TONE = { up: 'ok', running: 'ok', healthy: 'ok', down: 'bad', crashed: 'bad', failed: 'bad', backoff: 'warn', starting: 'warn', stopping: 'warn', unknown: 'warn', stopped: '' };

  function renderServices(list) {
    const root = $('services');
    if (!list.length) {
      root.replaceChildren(el('p', { class: 'empty', text: 'No services configured.' }));
      state.services.clear();
      return;
    }
    if (root.querySelector('.empty')) root.replaceChildren();
    const seen = new Set();
    for (const s of list) {
      seen.add(s.name);
      let svc = state.services.get(s.name);
      if (!svc) {
        svc = makeService(s);
        state.services.set(s.name, svc);
        root.append(svc.root);
      }
      updateService(svc, s);
    }
    for (const [name, svc] of state.services) {
      if (!seen.has(name)) {
        svc.root.remove();
        state.services.delete(name);
      }
    }
  }

  // `remote`: a service of another host, shown read-only (the API acts on its own host only).
  function makeService(s, remote) {
    const refs = {
      badges: el('div', { class: 'badges' }),
      kind: el('span', { class: 'kind' }),
      facts: el('dl', { class: 'facts' }),
      actions: el('div', { class: 'actions-area' }),
    };
    const root = el('article', { class: 'card service', dataset: { service: s.name } },
      el('div', { class: 'card-head' }, el('div', {}, el('h3', { style: 'display:inline', text: s.name }), refs.kind), refs.badges),
      refs.facts, refs.actions);
    const svc = { name: s.name, root, refs, data: s, action: null, remote: remote || null };
    if (remote) root.classList.add('remote');
    renderActions(svc);
    return svc;
  }

  function badge(text, tone, title) {
    return el('span', { class: 'badge ' + (tone || ''), text, title });
  }

  function updateService(svc, s) {
    svc.data = s;
    const r = svc.refs;
    r.kind.textContent = s.kind;
    svc.root.dataset.state = s.state;
    svc.root.dataset.bytes = s.bytes;
    const badges = [badge(s.state, STATE_TONE[s.state], s.probe_error || 'probe state')];
    if (s.process) {
      badges.push(badge('process ' + s.process.state, STATE_TONE[s.process.state], s.process.reason || 'run by vramd'));
    }
    if (s.busy) badges.push(badge('busy', 'warn'));
    // Put to sleep by vramd (docs/proxy.md "Depths"): its depth; woken ahead of demand ("Prewarm").
    if (s.asleep) badges.push(badge('asleep · ' + s.asleep.label, '', 'since ' + s.asleep.since + (s.asleep.reason ? ' · ' + s.asleep.reason : '')));
    if (s.prewarmed_at) badges.push(badge('prewarmed', 'ok', 'woken ahead of demand ' + ago(s.prewarmed_at) + ', not asked since'));
    // Found by [daemon] discover, in no config: watched, and left alone unless discover_unload.
    if (s.discovered) badges.push(badge('discovered', '', (s.discovered_by || '') + (s.can_unload ? '' : ' · left alone until it is in the config')));
    if (s.backoff_until && Date.parse(s.backoff_until) > Date.now()) badges.push(badge('unload backoff', 'warn', 'until ' + s.backoff_until));
    r.badges.replaceChildren(...badges);

    const facts = [];
    const fact = (k, v) => facts.push(el('dt', { text: k }), el('dd', {}, v));
    fact('VRAM', fmtBytes(s.bytes) + (s.per_gpu && s.per_gpu.length > 1 ? ' (' + s.per_gpu.map((p) => `GPU ${gpuLabel(p.gpu)}: ${fmtBytes(p.bytes)}`).join(', ') + ')' : ''));
    const inFlight = s.requests_in_flight ? `, ${s.requests_in_flight} request${s.requests_in_flight === 1 ? '' : 's'} in flight` : '';
    // Through vramd's proxy (GET /v1/proxy): how many it answered, and how many failed.
    const via = !svc.remote && state.proxyServices && state.proxyServices.get(s.name);
    if (via) {
      const n = via.requests_total;
      const bits = [`${n} request${n === 1 ? '' : 's'}`];
      if (via.in_flight) bits.push(`${via.in_flight} in flight`);
      if (via.server_errors_total) bits.push(`${via.server_errors_total} failed`);
      if (via.held_total) bits.push(`${via.held_total} held for a wake`);
      fact('Requests', el('span', { dataset: { requests: n, inFlight: via.in_flight } }, bits.join(' · '),
        via.url ? el('span', { class: 'sub', text: 'via ' + via.url }) : null));
    }
    if (s.busy) fact('Activity', 'busy' + inFlight + (s.queue_depth ? `, ${s.queue_depth} queued` : ''));
    else fact('Idle for', s.idle_seconds === null ? '—' : fmtDuration(s.idle_seconds) + (s.unload_after_idle_seconds ? ` (unloads after ${fmtDuration(s.unload_after_idle_seconds)})` : ''));
    fact('Models', s.models && s.models.length ? s.models.join(', ') : 'none loaded');
    // What it runs (docs/history.md): its version, and the last change of version or arguments.
    if (s.version || s.last_change) {
      fact('Version', el('span', { dataset: { version: s.version || '' } }, s.version || 'unknown',
        s.last_change ? el('span', { class: 'sub', dataset: { changedAt: s.last_change.at }, title: s.last_change.at,
          text: `changed ${ago(s.last_change.at)}: ${s.last_change.what}` }) : null));
    }
    // Its last few durations (GET /v1/history/records, cached: see wantDurations).
    if (!svc.remote) {
      wantDurations(s);
      const d = state.durations.get(s.name);
      if (d && d.records.length) fact('Durations', durationsFact(s, d));
    }
    if (s.asleep) {
      const kept = [`${fmtBytes(s.asleep.gpu_kept_bytes)} on the GPU`];
      if (s.asleep.host_ram_bytes) kept.push(`${fmtBytes(s.asleep.host_ram_bytes)} in host RAM${s.asleep.host_ram_measured ? '' : ' (estimated)'}`);
      fact('Asleep', el('span', { dataset: { asleep: s.asleep.depth } }, `${s.asleep.label}, keeps ${kept.join(' and ')}`,
        el('span', { class: 'sub', text: ago(s.asleep.since) + (s.asleep.reason ? ' · ' + s.asleep.reason : '') })));
    }
    // The expected wake from each depth it can sleep at: learned, else the kind's first guess.
    const wakes = Object.entries(s.wake_seconds || {});
    if (wakes.length) {
      fact('Wake', el('span', { dataset: { wake: wakes.map(([d]) => d).join(' ') } }, wakes.map(([d, w]) =>
        `${d === 'sleep1' ? 'from RAM' : d === 'sleep2' ? 'reload' : 'start'} ~${w.seconds < 10 ? w.seconds.toFixed(1) : w.seconds.toFixed(0)} s${w.measured ? '' : ' (guess)'}`).join(' · ')));
    }
    if (s.self_reported_vram_bytes !== null && s.self_reported_vram_bytes !== undefined) fact('Self-report', fmtBytes(s.self_reported_vram_bytes));
    if (s.process) {
      const p = s.process;
      const bits = [p.state];
      if (p.pid) bits.push('pid ' + p.pid);
      if (p.restarts) bits.push(p.restarts + ' restart' + (p.restarts === 1 ? '' : 's'));
      if (p.reason) bits.push(p.reason);
      fact('Process', bits.join(' · '));
    }
    if (s.last_unload) {
      const u = s.last_unload;
      fact('Last unload', el('span', {},
        `${fmtBytes(u.before_bytes)} → ${fmtBytes(u.after_bytes)} `,
        badge(u.outcome, u.outcome === 'freed' ? 'ok' : u.outcome === 'partial' ? 'warn' : 'bad'),
        el('span', { class: 'sub', text: `${ago(u.at)} · ${(u.duration_ms / 1000).toFixed(1)} s · ${u.reason}` })));
    } else {
      fact('Last unload', 'never');
    }
    if (s.probe_error) fact('Probe', el('span', { class: 'error', text: s.probe_error }));
    r.facts.replaceChildren(...facts);
    if (!svc.action) renderActions(svc);
  }

  const ACTIONS = [
    { name: 'unload', label: 'Unload', verb: 'Unload', danger: false },
    { name: 'start', label: 'Start', verb: 'Start', danger: false },
    { name: 'stop', label: 'Stop', verb: 'Stop', danger: true },
    { name: 'restart', label: 'Restart', verb: 'Restart', danger: true },
  ];

  // The actions row shows one of: the buttons; "Unload comfyui? Confirm / Cancel"; a spinner while
  // the request runs; then the buttons again with the result (or the API's error) under them.
  function renderActions(svc) {
    const s = svc.data;
    const a = svc.action;
    const area = svc.refs.actions;
    if (svc.remote) {
      area.replaceChildren(el('p', { class: 'readonly', dataset: { readonly: svc.remote } },
        `Read-only: unload, start, stop and restart act on ${svc.remote}'s own API (its dashboard).`));
      return;
    }
    if (a && a.phase === 'confirm') {
      const def = ACTIONS.find((x) => x.name === a.name);
      const extra = a.name === 'unload' ? ` It holds ${fmtBytes(s.bytes)}.` : a.name === 'stop' ? ' Its memory is freed; it stays down.' : '';
      const confirmBtn = el('button', { type: 'button', class: 'btn ' + (def.danger ? 'danger' : 'primary'), dataset: { confirm: a.name }, text: def.verb, onclick: () => runAction(svc, a.name) });
      area.replaceChildren(el('div', { class: 'confirm', role: 'alertdialog', 'aria-label': `Confirm ${a.name}`,
        onkeydown: (ev) => { if (ev.key === 'Escape') { svc.action = null; renderActions(svc); } } },
        el('span', { class: 'confirm-text', text: `${def.verb} ${s.name}?${extra}` }),
        confirmBtn,
        el('button', { type: 'button', class: 'btn', dataset: { cancel: a.name }, text: 'Cancel', onclick: () => { svc.action = null; renderActions(svc); } })));
      confirmBtn.focus();
      return;
    }
    if (a && a.phase === 'running') {
      area.replaceChildren(el('div', { class: 'result' }, el('span', { class: 'spinner' }), `${a.name === 'unload' ? 'Unloading' : a.name.charAt(0).toUpperCase() + a.name.slice(1) + 'ing'} ${s.name}…`));
      return;
    }
    const runnable = s.can_restart !== null && s.can_restart !== undefined;
    // Only the actions the service has: no Unload where its kind has no unload API (can_unload).
    const offered = ACTIONS.filter((def) => def.name !== 'unload' || s.can_unload !== false);
    const buttons = offered.map((def) => {
      const disabled = def.name !== 'unload' && !runnable;
      return el('button', {
        type: 'button', class: 'btn', dataset: { action: def.name }, text: def.label,
        disabled, title: disabled ? 'vramd does not run this service (no start command, container or unit)' : `${def.verb} ${s.name}`,
        onclick: () => { svc.action = { name: def.name, phase: 'confirm' }; renderActions(svc); },
      });
    });
    const out = [el('div', { class: 'actions' }, buttons)];
    if (svc.lastResult) out.push(el('div', { class: svc.lastResult.ok ? 'result ok' : 'error', role: 'status', text: svc.lastResult.text }));
    area.replaceChildren(...out);
  }

  async function runAction(svc, name) {
    svc.action = { name, phase: 'running' };
    svc.lastResult = null;
    renderActions(svc);
    try {
      const body = await api(`/v1/services/${encodeURIComponent(svc.name)}/${name}`, { method: 'POST' });
      let text = body && body.message ? body.message : `${name}: done`;
      let ok = !(body && (body.ok === false || body.outcome === 'failed' || body.outcome === 'ineffective'));
      if (name === 'unload' && body && body.outcome) {
        text = `${body.outcome}: ${fmtBytes(body.before_bytes)} → ${fmtBytes(body.after_bytes)} in ${(body.duration_ms / 1000).toFixed(1)} s`;
        if (body.message && !ok) text += ` (${body.message})`;
      } else if (body && body.done === false && !body.message) {
        // 202: accepted and under way; the card's state and the feed say how it ends.
        text = `${name} under way${body.state ? ` (${body.state})` : ''}`;
        ok = true;
      }
      svc.lastResult = { ok, text };
    } catch (e) {
      svc.lastResult = { ok: false, text: e instanceof AuthNeeded ? 'A token is needed.' : `${name} failed: ${e.message}` };
    }
    svc.action = null;
    renderActions(svc);
    refreshSoon();
  }

  // ---- leases ----

  function renderLeases(body) {
    const list = activeLeases(body);
    $('leases-count').textContent = list.length ? `${list.length} active` : '';
    $('leases').replaceChildren(leaseTable(list, false));
  }

  function activeLeases(body) {
    return ((body && body.leases) || []).filter((l) => l.state !== 'ended' && l.state !== 'released');
  }

  // The leases as a table; `withHost`: a column naming the host that holds (or keeps) each.
  function leaseTable(list, withHost) {
    if (!list.length) return el('p', { class: 'empty', text: 'No leases: nothing is waiting for GPU memory.' });
    list = list.slice();
    list.sort((a, b) => (withHost ? String(a.host).localeCompare(String(b.host)) : 0) ||
      (a.state === 'queued') - (b.state === 'queued') || (a.position ?? 0) - (b.position ?? 0) || a.id - b.id);
    const rows = list.map((l) => {
      const who = l.label || l.holder || l.owner;
      const reason = l.reason && l.reason.text ? el('span', { class: 'lease-reason', text: l.reason.text }) : null;
      const stateTone = l.state === 'granted' ? 'ok' : l.state === 'queued' || l.state === 'suspended' ? 'warn' : '';
      const command = Array.isArray(l.command) ? l.command.join(' ') : l.command;
      const details = [command, l.holder && l.holder !== who ? 'by ' + l.holder : '', l.priority ? 'priority ' + l.priority : '',
        l.preemptible ? 'preemptible' : ''].filter(Boolean).join(' · ');
      // A preemptible lease suspended (docs/api.md "Preemptible leases"): since when, for whom.
      const suspension = l.suspension ? el('span', { class: 'lease-reason lease-suspension', text:
        l.suspended_at
          ? `suspended at ${new Date(l.suspended_at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })} for ${l.suspended_for}: ${fmtBytes(l.suspended_bytes)} in host RAM`
          : `${l.suspension} for ${l.suspended_for}` }) : null;
      const position = l.state === 'queued' && l.position !== null && l.position !== undefined ? ` #${l.position + 1}` : '';
      return el('tr', { dataset: { lease: l.id, state: l.state, host: l.host } },
        withHost ? el('td', { class: 'lease-host', text: l.host }) : null,
        el('td', {}, el('strong', { text: '#' + l.id }), ' ', who,
          details ? el('span', { class: 'sub', text: details }) : null, reason, suspension),
        el('td', {}, badge(l.state + position, stateTone)),
        el('td', { class: 'num' }, fmtBytes(l.vram_bytes), el('span', { class: 'sub', text: l.gpu === null || l.gpu === undefined ? 'any GPU' : 'GPU ' + (l.gpu_label || l.gpu) })));
    });
    return el('div', { class: 'table-wrap' }, el('table', {},
      el('thead', {}, el('tr', {}, withHost ? el('th', { text: 'Host' }) : null, el('th', { text: 'Lease' }), el('th', { text: 'State' }), el('th', { class: 'num', text: 'VRAM' }))),
      el('tbody', {}, rows)));
  }

  // ---- the request path (GET /v1/proxy) ----

  function renderProxy(body) {
    const panel = $('proxy-panel');
    state.proxyServices = new Map((body.services || []).map((x) => [x.name, x]));
    if (!body.enabled) { panel.hidden = true; return; }
    panel.hidden = false;
    const models = body.models || [];
    const aliases = Object.entries(body.aliases || {});
    $('proxy-count').textContent = `${models.length} model${models.length === 1 ? '' : 's'}`;
    const parts = [];
    if (body.front_door) {
      parts.push(el('p', { class: 'front-door' }, 'Front door ', el('code', { text: body.front_door.url }),
        body.front_door.keys ? ' (API keys required)' : ''));
    }
    if (models.length) {
      const rows = models.map((m) => el('tr', { dataset: { model: m.model, service: m.service } },
        el('td', {}, el('code', { text: m.model })), el('td', { text: m.service })));
      for (const [alias, target] of aliases)
        rows.push(el('tr', { dataset: { model: alias, alias: target } },
          el('td', {}, el('code', { text: alias }), el('span', { class: 'sub', text: 'alias of ' + target })), el('td', { text: '' })));
      parts.push(el('div', { class: 'table-wrap' }, el('table', { id: 'proxy-models' },
        el('thead', {}, el('tr', {}, el('th', { text: 'Model' }), el('th', { text: 'Service' }))),
        el('tbody', {}, rows))));
    } else {
      parts.push(el('p', { class: 'empty', text: 'No models yet: they appear as services report them.' }));
    }
    $('proxy').replaceChildren(...parts);
  }

  // ---- doctor ----

  function renderDoctor(body) {
    const list = body.services || [];
    if (!list.length) {
      $('doctor').replaceChildren(el('p', { class: 'empty', text: 'No crashes recorded.' }));
      return;
    }
    $('doctor').replaceChildren(...list.map((d) => {
      const head = el('div', { class: 'diag-head' }, el('h3', { text: d.service }),
        el('div', { class: 'badges' },
          d.state ? badge(d.state, STATE_TONE[d.state]) : null,
          d.restarts ? badge(d.restarts + ' restart' + (d.restarts === 1 ? '' : 's'), 'warn') : null));
      const crashes = (d.crashes || []).map((c) => el('div', { class: 'crash', dataset: { signature: c.signature } },
        el('div', {}, el('strong', { text: c.title || c.signature }), ` ×${c.count}`,
          el('span', { class: 'sub', text: `last ${ago(c.last_seen)} · ${c.last_exit}` })),
        c.explanation ? el('div', { text: c.explanation }) : null,
        c.suggestion ? el('div', { class: 'suggestion', text: '→ ' + c.suggestion }) : null,
        c.evidence && c.evidence.length ? el('pre', { text: c.evidence.join('\n') }) : null));
      if (!crashes.length) crashes.push(el('div', { class: 'muted', text: d.reason || 'No crashes.' }));
      return el('div', { class: 'diag', dataset: { service: d.service } }, head, ...crashes);
    }));
  }

  // ---- durations history (docs/history.md): the card's last durations, the history view ----

  // Seconds as the history reads them: 0.05 s, 1.2 s, 89.5 s, 2 min 3 s.
  function fmtSecs(s) {
    if (s === null || s === undefined) return '—';
    if (s < 0.1) return s.toFixed(2) + ' s';
    if (s < 100) return s.toFixed(1) + ' s';
    return fmtDuration(s);
  }

  // Only ComfyUI keeps a history of prompts; the others have the proxy's records of requests.
  function durationsKind(s) { return s.kind === 'comfyui' ? 'prompt' : 'request'; }

  // Reads a service's last records at most every 10 s, or sooner (from 1.5 s on, at most every
  // 4 s) once records are likely: a run ended (busy, queue or the proxy's count changed), or its
  // version or arguments changed (service.changed). Services that can have none are not asked.
  function wantDurations(s) {
    const via = state.proxyServices && state.proxyServices.get(s.name);
    if (s.kind !== 'comfyui' && !via) return;
    let d = state.durations.get(s.name);
    if (!d) { d = { records: [], kind: durationsKind(s), at: 0, due: 0, key: null, loading: false, off: false }; state.durations.set(s.name, d); }
    const now = Date.now();
    const key = [s.state, s.busy, s.queue_depth, s.version, s.args_fingerprint, via ? via.requests_total : ''].join('|');
    if (d.key !== null && key !== d.key && !d.due) d.due = now + 1500;
    d.key = key;
    if (d.loading || d.off) return;
    if (now - d.at >= 10000 || (d.due && now >= d.due && now - d.at >= 4000)) loadDurations(s.name, d);
  }

  function durationsChanged(name) {
    const d = state.durations.get(name);
    if (d) d.due = Date.now();
    if (state.hv && state.hv.service === name) loadHistoryView();
  }

  async function loadDurations(name, d) {
    d.loading = true;
    d.due = 0;
    try {
      const body = await api(`/v1/history/records?service=${encodeURIComponent(name)}&kind=${d.kind}&limit=5`);
      const newest = d.records.length ? d.records[0].at : null;
      d.records = body.records || [];
      // New runs: the open history view of this service draws them too.
      if (state.hv && state.hv.service === name && d.records.length && d.records[0].at !== newest && newest !== null) loadHistoryView();
    } catch (e) {
      if (e.status === 404) d.off = true;  // an older daemon: no durations history
    } finally {
      d.at = Date.now();
      d.loading = false;
    }
    const svc = state.services.get(name);
    if (svc) updateService(svc, svc.data);
  }

  // "89.5 s · 90.1 s · 88.7 s (prompts)", or "1.2 s · 0.9 s, 61 tok/s" for requests; newest first.
  function durationsFact(s, d) {
    const recs = d.records;
    const failed = (r) => (r.kind === 'prompt' ? r.outcome !== 'success' : !(r.status >= 200 && r.status < 300));
    const parts = recs.map((r) => fmtSecs(r.seconds) + (failed(r) ? ' ✗' : '')).join(' · ');
    const tps = recs.find((r) => r.tokens_per_second !== null && r.tokens_per_second !== undefined);
    const tail = d.kind === 'prompt' ? ' (prompts)' : tps ? `, ${Math.round(tps.tokens_per_second)} tok/s` : ' (requests)';
    return el('span', { class: 'durations', dataset: { durations: recs.length, kind: d.kind }, title: 'newest first' },
      parts + tail,
      el('span', { class: 'sub' }, `newest first · last ${ago(recs[0].at)} `,
        el('button', { type: 'button', class: 'btn small', dataset: { history: s.name }, text: 'History',
          'aria-controls': 'history-view', onclick: () => openHistory(s.name) })));
  }

  // The history view: a workflow (or model) picker, its runs over time with a line where the
  // version (or the arguments) changed, and p50/p95 per variant.
  function openHistory(name) {
    state.hv = { service: name, by: state.hv ? state.hv.by : 'version', subject: null, groups: [], variants: [], records: [] };
    const view = $('history-view');
    view.hidden = false;
    view.dataset.service = name;
    $('history-title').textContent = 'Durations · ' + name;
    for (const b of $('history-by').querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.by === state.hv.by));
    $('history-svg-wrap').replaceChildren();
    $('history-groups').replaceChildren();
    $('history-note').textContent = '';
    loadHistoryView().then(() => view.scrollIntoView({ block: 'nearest' }));
  }

  function closeHistory() {
    state.hv = null;
    $('history-view').hidden = true;
    const b = document.querySelector('#services button[data-history]');
    if (b) b.focus();
  }

  let hvGeneration = 0;
  async function loadHistoryView() {
    const hv = state.hv;
    if (!hv) return;
    const gen = ++hvGeneration;
    const view = $('history-view');
    view.dataset.state = 'loading';
    const q = 'service=' + encodeURIComponent(hv.service);
    try {
      const dur = await api(`/v1/history/durations?${q}&by=${hv.by}`);
      if (gen !== hvGeneration) return;
      hv.groups = dur.groups || [];
      hv.variants = dur.variants || [];
      const subjects = [];
      for (const g of hv.groups) {
        let x = subjects.find((v) => v.subject === g.subject && v.kind === g.kind);
        if (!x) subjects.push(x = { kind: g.kind, subject: g.subject, model: g.model, runs: 0 });
        x.runs += g.count + g.failed;
        if (g.model) x.model = g.model;
      }
      hv.subjects = subjects;
      if (!subjects.some((x) => x.subject === hv.subject)) {
        // The subject of the service's newest run, else the one seen last.
        const d = state.durations.get(hv.service);
        const r = d && d.records[0];
        const newest = r && subjects.find((x) => x.subject === (r.workflow || r.model));
        hv.subject = newest ? newest.subject : subjects.length ? subjects[subjects.length - 1].subject : null;
      }
      renderSubjectPicker(hv);
      const sub = subjects.find((x) => x.subject === hv.subject);
      if (!sub) {
        hv.records = [];
        $('history-svg-wrap').replaceChildren(el('p', { class: 'empty', text: 'No runs recorded for this service yet.' }));
        $('history-groups').replaceChildren();
        $('history-note').textContent = '';
        view.dataset.state = 'ready';
        return;
      }
      const filter = sub.subject ? (sub.kind === 'prompt' ? '&workflow=' : '&model=') + encodeURIComponent(sub.subject) : '';
      const body = await api(`/v1/history/records?${q}&kind=${sub.kind}${filter}&limit=1000`);
      if (gen !== hvGeneration) return;
      hv.records = (body.records || []).filter((r) => (r.workflow || r.model || '') === sub.subject);
      if (body.variants && body.variants.length) hv.variants = body.variants;
      renderHistoryView(hv, sub);
      view.dataset.state = 'ready';
    } catch (e) {
      if (gen !== hvGeneration) return;
      view.dataset.state = 'error';
      if (!(e instanceof AuthNeeded)) $('history-svg-wrap').replaceChildren(el('p', { class: 'error', text: 'History: ' + e.message }));
    }
  }

  function subjectLabel(x) {
    if (x.kind === 'prompt') return `workflow ${x.subject ? x.subject.slice(0, 8) : '?'}${x.model ? ' · ' + x.model : ''}`;
    return x.subject || '(no model)';
  }

  function renderSubjectPicker(hv) {
    const sel = $('history-subject');
    sel.replaceChildren(...hv.subjects.map((x) => el('option', { value: x.subject, selected: x.subject === hv.subject,
      text: `${subjectLabel(x)} (${x.runs} run${x.runs === 1 ? '' : 's'})` })));
    sel.disabled = hv.subjects.length < 2;
    sel.hidden = hv.subjects.length === 0;
  }

  // A variant's name: its version, or (by arguments) the change that made it.
  function variantName(hv, key) {
    if (hv.by === 'version') return key || 'unknown';
    const v = hv.variants.find((x) => x.args_fingerprint === key);
    if (!key) return 'no arguments';
    return v && v.label && hv.variants.indexOf(v) > 0 ? v.label : 'args ' + key;
  }

  // Where the version (or the argument set) changed: each variant whose version (fingerprint)
  // differs from the variant before it, at its first_seen.
  function variantMarkers(hv) {
    const out = [];
    let prev;
    hv.variants.forEach((v, i) => {
      const key = hv.by === 'version' ? v.version : v.args_fingerprint;
      if (i > 0 && key !== prev) out.push({ t: Date.parse(v.first_seen) / 1000, label: variantName(hv, key), key });
      prev = key;
    });
    return out;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svgEl(tag, attrs, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children.flat()) if (c) e.append(c);
    return e;
  }

  function renderHistoryView(hv, sub) {
    const groups = hv.groups.filter((g) => g.subject === sub.subject && g.kind === sub.kind);
    const keyOf = (r) => (hv.by === 'version' ? r.version || '' : r.args_fingerprint || '');
    const colorOf = (key) => {
      const i = groups.findIndex((g) => (g.variant || '') === key);
      return SERVICE_COLORS[(i < 0 ? groups.length : i) % SERVICE_COLORS.length];
    };
    hv.draw = () => drawDurations(hv, sub, groups, keyOf, colorOf);
    hv.draw();

    const tps = sub.kind === 'request';
    const rows = groups.map((g) => {
      const change = g.change_pct === null || g.change_pct === undefined ? ''
        : (g.change_pct > 0 ? '+' : g.change_pct < 0 ? '−' : '') + Math.abs(g.change_pct).toFixed(1) + '%';
      return el('tr', { dataset: { variant: g.variant || '', count: g.count, failed: g.failed } },
        el('td', {}, el('span', { class: 'swatch', style: `background:${colorOf(g.variant || '')}` }), variantName(hv, g.variant || ''),
          hv.by === 'args' && g.variant && variantName(hv, g.variant) !== 'args ' + g.variant ? el('span', { class: 'sub', text: 'args ' + g.variant }) : null),
        el('td', { class: 'num' }, String(g.count), g.failed ? el('span', { class: 'failed', text: ` +${g.failed}✗`, title: `${g.failed} failed` }) : null),
        el('td', { class: 'num', text: g.count ? fmtSecs(g.p50_seconds) : '—' }),
        el('td', { class: 'num', text: g.count ? fmtSecs(g.p95_seconds) : '—' }),
        tps ? el('td', { class: 'num', text: g.tokens_per_second_p50 ? Math.round(g.tokens_per_second_p50) + '' : '—' }) : null,
        el('td', { class: 'num change' + (g.change_pct < 0 ? ' faster' : g.change_pct > 0 ? ' slower' : ''), text: change,
          title: change ? 'p50 against the variant before' : null }));
    });
    $('history-groups').replaceChildren(el('div', { class: 'table-wrap' }, el('table', { id: 'history-table' },
      el('thead', {}, el('tr', {}, el('th', { text: hv.by === 'version' ? 'Version' : 'Arguments' }), el('th', { class: 'num', text: 'n' }),
        el('th', { class: 'num', text: 'p50' }), el('th', { class: 'num', text: 'p95' }), tps ? el('th', { class: 'num', text: 'tok/s' }) : null,
        el('th', { class: 'num', text: 'change' }))),
      el('tbody', {}, rows))));
  }

  // One dot per run (execution seconds over time, by variant colour; failed runs hollow), each
  // variant's p50 as a faint line over its runs, and a dashed line where the variant changed.
  function drawDurations(hv, sub, groups, keyOf, colorOf) {
    const wrap = $('history-svg-wrap');
    const recs = hv.records.filter((r) => r.seconds !== null && r.seconds !== undefined && r.at);
    const W = Math.max(280, wrap.clientWidth || 600);
    const H = W < 500 ? 180 : 230;
    const m = { l: 50, r: 14, t: 20, b: 24 };
    const ts = recs.map((r) => Date.parse(r.at) / 1000);
    let t0 = ts.length ? Math.min(...ts) : Date.now() / 1000 - 60;
    let t1 = ts.length ? Math.max(...ts) : Date.now() / 1000;
    const lo = t0;
    const hi = t1;
    const markers = variantMarkers(hv).filter((k) => k.t >= lo && k.t <= hi);
    if (t1 - t0 < 60) { const mid = (t0 + t1) / 2; t0 = mid - 30; t1 = mid + 30; }
    const pad = (t1 - t0) * 0.04;
    t0 -= pad; t1 += pad;
    const ymaxRaw = Math.max(0.001, ...recs.map((r) => r.seconds)) * 1.12;
    const ySteps = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200];
    const ystep = ySteps.find((s) => ymaxRaw / s <= 4) || 7200;
    const ymax = Math.ceil(ymaxRaw / ystep) * ystep;
    const x = (t) => m.l + (t - t0) / (t1 - t0) * (W - m.l - m.r);
    const y = (v) => H - m.b - v / ymax * (H - m.t - m.b);
    const parts = [];
    for (let v = 0; v <= ymax + 1e-9; v += ystep) {
      parts.push(svgEl('line', { class: 'hv-grid', x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }));
      parts.push(svgEl('text', { class: 'hv-axis', x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end', text: ystep < 1 ? v.toFixed(ystep < 0.1 ? 2 : 1) + ' s' : fmtDuration(v) }));
    }
    const incrs = TIME_INCRS.concat([172800, 604800, 1209600, 2592000]);
    const incr = incrs.find((i) => (t1 - t0) / i <= Math.max(2, Math.floor((W - m.l - m.r) / 90))) || 2592000;
    const tz = -new Date().getTimezoneOffset() * 60;
    for (let t = Math.ceil((t0 + tz) / incr) * incr - tz; t <= t1; t += incr) {
      const label = incr >= 86400 ? new Date(t * 1000).toLocaleDateString([], { month: 'short', day: 'numeric' }) : timeLabel(t, incr);
      parts.push(svgEl('line', { class: 'hv-tick', x1: x(t), x2: x(t), y1: H - m.b, y2: H - m.b + 4 }));
      parts.push(svgEl('text', { class: 'hv-axis', x: x(t), y: H - 6, 'text-anchor': 'middle', text: label }));
    }
    parts.push(svgEl('line', { class: 'hv-baseline', x1: m.l, x2: W - m.r, y1: y(0), y2: y(0) }));
    for (const g of groups) {
      if (!g.count || !g.first || !g.last) continue;
      const a = x(Date.parse(g.first) / 1000);
      const b = x(Date.parse(g.last) / 1000);
      parts.push(svgEl('line', { class: 'hv-p50', x1: a, x2: Math.max(b, a + 6), y1: y(g.p50_seconds), y2: y(g.p50_seconds), stroke: colorOf(g.variant || '') },
        svgEl('title', { text: `${variantName(hv, g.variant || '')}: p50 ${fmtSecs(g.p50_seconds)}` })));
    }
    for (const k of markers) {
      const mx = x(k.t);
      // The label on the side with more room, cut to fit (whole in its tooltip): ~6.5 px a letter.
      const fitsAfter = k.label.length * 6.5 <= W - mx - 8;
      const right = !fitsAfter && mx > W - mx;
      const fit = Math.max(6, Math.floor((right ? mx - 8 : W - mx - 8) / 6.5));
      const label = k.label.length > fit ? k.label.slice(0, fit - 1) + '…' : k.label;
      parts.push(svgEl('g', { class: 'hv-marker', 'data-variant': k.key || '' },
        svgEl('line', { x1: mx, x2: mx, y1: m.t - 4, y2: H - m.b }),
        svgEl('text', { x: right ? mx - 4 : mx + 4, y: m.t - 8, 'text-anchor': right ? 'end' : 'start', text: label }),
        svgEl('title', { text: `${k.label} since ${new Date(k.t * 1000).toLocaleString([], { hour12: false })}` })));
    }
    recs.forEach((r, i) => {
      const ok = r.kind === 'prompt' ? r.outcome === 'success' : r.status >= 200 && r.status < 300;
      const c = colorOf(keyOf(r));
      const what = [clock(r.at), fmtSecs(r.seconds), variantName(hv, keyOf(r)), r.kind === 'prompt' ? r.outcome : 'status ' + r.status];
      if (r.tokens_per_second) what.push(Math.round(r.tokens_per_second) + ' tok/s');
      parts.push(svgEl('circle', { class: 'hv-dot' + (ok ? '' : ' failed'), cx: x(ts[i]).toFixed(1), cy: y(r.seconds).toFixed(1), r: 3.5,
        fill: ok ? c : 'none', stroke: ok ? null : '#e5534b' }, svgEl('title', { text: what.join(' · ') })));
    });
    const svg = svgEl('svg', { id: 'history-svg', class: 'hv-svg', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img',
      'aria-label': `${recs.length} runs of ${subjectLabel(sub)}, execution seconds over time`,
      'data-points': recs.length, 'data-markers': markers.length, 'data-subject': sub.subject, 'data-by': hv.by }, parts);
    wrap.replaceChildren(svg);
    hv.width = W;
    const failed = recs.filter((r) => (r.kind === 'prompt' ? r.outcome !== 'success' : !(r.status >= 200 && r.status < 300))).length;
    $('history-note').textContent = recs.length
      ? `${recs.length} run${recs.length === 1 ? '' : 's'}${failed ? ` (${failed} failed, hollow)` : ''} of ${subjectLabel(sub)}, ` +
        `${clock(recs[recs.length - 1].at)} to ${clock(recs[0].at)}${recs.length >= 1000 ? ' (the last 1000)' : ''}. ` +
        `Execution seconds; dashed: the ${hv.by === 'version' ? 'version' : 'arguments'} changed; faint lines: p50.`
      : 'No runs with a duration.';
  }

  $('history-subject').addEventListener('change', (ev) => {
    if (!state.hv) return;
    state.hv.subject = ev.target.value;
    loadHistoryView();
  });
  $('history-by').addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-by]');
    if (!b || !state.hv) return;
    state.hv.by = b.dataset.by;
    for (const x of $('history-by').querySelectorAll('button')) x.setAttribute('aria-pressed', String(x === b));
    loadHistoryView();
  });
  $('history-close').addEventListener('click', closeHistory);
  $('history-view').addEventListener('keydown', (ev) => { if (ev.key === 'Escape') closeHistory(); });
  new ResizeObserver(() => {
    const hv = state.hv;
    if (hv && hv.draw && Math.abs(($('history-svg-wrap').clientWidth || 0) - hv.width) > 2) hv.draw();
  }).observe($('history-svg-wrap'));

  // ---- events: history, then a live stream ----

  function eventTone(type) {
    if (/crash|fail|ineffective|error|unhealthy|refused/.test(type)) return 'bad';
    if (/partial|backoff|evict|queued|waiting|stopp/.test(type)) return 'warn';
    if (/freed|finished|healthy|granted|started|done/.test(type)) return 'ok';
    return '';
  }

  function addEvent(e, fresh) {
    if (e.id !== undefined) {
      if (state.seenEvents.has(e.id)) return;
      state.seenEvents.add(e.id);
      if (e.id > state.lastEventId) state.lastEventId = e.id;
    }
    const li = el('li', { class: fresh ? 'fresh' : '', dataset: { type: e.type, id: e.id, subject: e.subject || '' }, 'data-tone': eventTone(e.type) },
      el('time', { datetime: e.at, text: clock(e.at) }),
      el('span', { class: 'etype', text: e.type }),
      el('span', { class: 'emsg', text: e.message }));
    const list = $('events');
    list.prepend(li);
    while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();
    // Ids older than the shown ones cannot come again (a resume asks for newer): forget them.
    if (state.seenEvents.size > 4 * MAX_EVENTS)
      state.seenEvents = new Set([...list.children].map((x) => Number(x.dataset.id)));
    $('events-empty').hidden = true;
    // A new version or argument set: its durations are read again at the next tick.
    if (fresh && e.type === 'service.changed' && e.subject) durationsChanged(e.subject);
  }

  async function loadEventHistory() {
    const since = new Date(Date.now() - 3600 * 1000).toISOString();
    let after = 0;
    const all = [];
    for (let page = 0; page < 5; page++) {
      const q = after ? `after=${after}` : `since=${encodeURIComponent(since)}`;
      const body = await api(`/v1/events?${q}&limit=1000`);
      const got = body.events || [];
      all.push(...got);
      if (got.length < 1000) break;
      after = got[got.length - 1].id;
    }
    for (const e of all.slice(-MAX_EVENTS)) addEvent(e, false);
  }

  function setLive(s) {
    $('live').dataset.state = s;
    $('live').querySelector('.live-text').textContent = s === 'on' ? 'live' : s === 'connecting' ? 'connecting…' : 'offline';
  }

  let streamAbort = null;
  let streamGeneration = 0;

  function restartStream() {
    if (streamAbort) streamAbort.abort();
    streamEvents(++streamGeneration);
  }

  // /v1/events as Server-Sent Events, read with fetch() so the bearer token goes in a header.
  // On a drop: reconnect with ?after=<last id seen>, backing off up to 15 s.
  async function streamEvents(gen) {
    let backoff = 1000;
    while (gen === streamGeneration) {
      if (state.needToken) { await sleep(1000); continue; }
      const ctl = new AbortController();
      streamAbort = ctl;
      let watchdog = null;
      const kick = () => {
        clearTimeout(watchdog);
        watchdog = setTimeout(() => ctl.abort(), 40000);  // the daemon sends a keep-alive every 15 s
      };
      setLive('connecting');
      try {
        const q = state.lastEventId ? `?after=${state.lastEventId}` : '';
        const res = await fetch('/v1/events' + q, { headers: headers({ Accept: 'text/event-stream' }), signal: ctl.signal, cache: 'no-store' });
        if (res.status === 401) { askToken(state.token ? 'That token was refused.' : ''); continue; }
        if (!res.ok || !res.body) throw new Error(`events: ${res.status}`);
        setLive('on');
        $('events-state').textContent = '';
        backoff = 1000;
        kick();
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          kick();
          buf += value.replace(/\r\n?/g, '\n');
          let cut;
          while ((cut = buf.indexOf('\n\n')) >= 0) {
            handleFrame(buf.slice(0, cut));
            buf = buf.slice(cut + 2);
          }
        }
      } catch (e) {
        // dropped, aborted or refused: reconnect below
      } finally {
        clearTimeout(watchdog);
      }
      if (gen !== streamGeneration) return;
      setLive('off');
      $('events-state').textContent = 'reconnecting…';
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 15000);
    }
  }

  function handleFrame(frame) {
    let data = '';
    let id = null;
    for (const line of frame.split('\n')) {
      if (!line || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'data') data += (data ? '\n' : '') + value;
      else if (field === 'id') id = Number(value);
    }
    if (!data) return;
    let e;
    try { e = JSON.parse(data); } catch (err) { return; }
    if (e.id === undefined && id !== null) e.id = id;
    addEvent(e, true);
    refreshSoon();
  }

  // ---- several hosts: the host switcher, the all-hosts overview, another host's view ----
  // With more than one host on the shared PostgreSQL store (GET /v1/hosts), a switcher: this host
  // (the dashboard as it is with one), All hosts (a card per host), or one other host's last
  // status snapshot. Another host's view is read-only: this API acts only on its own host.

  function manyHosts() { return !!(state.hosts && state.hosts.hosts && state.hosts.hosts.length > 1); }

  function viewFromHash() {
    let h = location.hash.slice(1);
    try { h = decodeURIComponent(h); } catch (e) { return 'local'; }
    if (h === 'all-hosts') return 'all';
    if (h.startsWith('host=') && h.length > 5) return h.slice(5);
    return 'local';
  }

  function viewHash(view) {
    return view === 'local' ? '#' : view === 'all' ? '#all-hosts' : '#host=' + encodeURIComponent(view);
  }

  // The view asked for, as it can be shown now: this host's own name is the local view.
  function currentView() {
    if (!manyHosts()) return 'local';
    if (state.status && state.view === state.status.host) return 'local';
    return state.view;
  }

  window.addEventListener('hashchange', () => {
    state.view = viewFromHash();
    state.viewLeases = null;
    renderHosts();
    refreshSoon();
  });

  async function loadViewLeases() {
    const view = currentView();
    if (view === 'local') { state.viewLeases = null; return; }
    try {
      state.viewLeases = await api('/v1/leases?host=' + encodeURIComponent(view === 'all' ? 'all' : view));
    } catch (e) {
      if (e instanceof AuthNeeded) throw e;
      state.viewLeases = { error: e.message };
    }
  }

  function hostRow(name) {
    return ((state.hosts && state.hosts.hosts) || []).find((h) => h.host === name) || null;
  }

  function heartbeatText(h) {
    const age = fmtDuration((h.age_ms || 0) / 1000);
    if (h.state !== 'lost') return `heartbeat ${age} ago`;
    const timeout = state.hosts && state.hosts.host_timeout_ms ? fmtDuration(state.hosts.host_timeout_ms / 1000) : 'host_timeout';
    return `lost: no heartbeat for ${age} (host_timeout ${timeout})`;
  }

  function renderHosts() {
    const many = manyHosts();
    const view = currentView();
    const me = state.status && state.status.host;
    $('host-switch').hidden = !many;
    $('local-view').hidden = view !== 'local';
    $('cluster-view').hidden = view === 'local';
    if (!many) return;
    const tabs = [['local', me || 'this host'], ['all', 'All hosts']];
    for (const h of state.hosts.hosts) if (h.host !== me) tabs.push([h.host, h.host]);
    $('host-switch').replaceChildren(...tabs.map(([v, label]) => {
      const row = v === 'local' ? hostRow(me) : v === 'all' ? null : hostRow(v);
      return el('a', { class: 'host-tab', href: viewHash(v), dataset: { view: v, state: row ? row.state : '' },
        'aria-current': view === v ? 'page' : false, title: row ? heartbeatText(row) : 'every host on this store' },
        row ? el('span', { class: 'dot' }) : null, label,
        v === 'local' ? el('span', { class: 'tab-note', text: 'this host' }) : null,
        row && row.state === 'lost' ? el('span', { class: 'tab-note bad', text: 'lost' }) : null);
    }));
    if (view === 'local') return;
    if (view === 'all') renderOverview();
    else renderRemote(view);
  }

  // Every host: one card each (heartbeat, GPUs, services, leases), then every host's leases.
  function renderOverview() {
    state.remote = null;
    const me = state.status && state.status.host;
    // The store's leases (?host=all) once read: a lost host's snapshot still lists what has
    // moved to live hosts since.
    const fresh = state.viewLeases && !state.viewLeases.error && state.viewLeases.leases ? activeLeases(state.viewLeases) : null;
    const leases = fresh || [];
    const cards = state.hosts.hosts.map((h) => hostCard(h, h.host === me, fresh && fresh.filter((l) => l.host === h.host)));
    $('cluster-view').replaceChildren(
      el('section', { class: 'panel', 'aria-labelledby': 'overview-title' },
        el('div', { class: 'panel-head' }, el('h2', { id: 'overview-title', text: 'All hosts' }),
          el('span', { class: 'count', text: `${state.hosts.hosts.length} hosts · ${state.hosts.hosts.filter((h) => h.state === 'lost').length} lost` })),
        el('div', { class: 'host-cards', id: 'host-cards' }, cards)),
      el('section', { class: 'panel', 'aria-labelledby': 'all-leases-title' },
        el('div', { class: 'panel-head' }, el('h2', { id: 'all-leases-title', text: 'Leases on every host' }),
          el('span', { class: 'count', text: leases.length ? `${leases.length} active` : '' })),
        el('div', { id: 'all-leases' }, state.viewLeases && state.viewLeases.error
          ? el('p', { class: 'error', text: 'Leases: ' + state.viewLeases.error }) : leaseTable(leases, true))));
  }

  function usageBar(g) {
    const segs = orderSeries(g.holdings || []).map((h) => el('span', {
      style: `width:${(100 * h.bytes / Math.max(1, g.total_bytes)).toFixed(2)}%;background:${ownerColor(h.owner, h.owner_kind)}`,
      title: `${h.owner}: ${fmtBytes(h.bytes)}`,
    }));
    return el('div', { class: 'usage', role: 'img', 'aria-label': `${fmtBytes(g.used_bytes)} used of ${fmtBytes(g.total_bytes)}` }, segs);
  }

  // `leases`: the host's leases from the store, else (not read yet) its snapshot's.
  function hostCard(h, local, leases) {
    const s = h.status || {};
    const lost = h.state === 'lost';
    leases = leases || s.leases || [];
    const granted = leases.filter((l) => l.state === 'granted').length;
    const queued = leases.filter((l) => l.state === 'queued').length;
    const gpus = (s.gpus || []).map((g) => {
      const pct = g.total_bytes ? Math.round(100 * g.used_bytes / g.total_bytes) : 0;
      return el('div', { class: 'host-gpu', dataset: { gpu: g.index, usedBytes: g.used_bytes, totalBytes: g.total_bytes } },
        el('div', { class: 'host-gpu-name', text: `GPU ${g.label || g.index} · ${g.name || 'unknown'}` }),
        usageBar(g),
        el('div', { class: 'usage-text' }, el('strong', { text: fmtBytes(g.used_bytes) }), ` used of ${fmtBytes(g.total_bytes)} (${pct}%)`));
    });
    if (!gpus.length) gpus.push(el('p', { class: 'empty', text: h.status ? 'No GPU found.' : 'No status written yet.' }));
    const services = (s.services || []).map((x) => el('tr', { dataset: { service: x.name, state: x.state, bytes: x.bytes } },
      el('td', { text: x.name }), el('td', {}, badge(x.state, STATE_TONE[x.state])), el('td', { class: 'num', text: fmtBytes(x.bytes) })));
    return el('article', { class: 'card host-card' + (lost ? ' lost' : ''), dataset: { host: h.host, state: h.state } },
      el('div', { class: 'card-head' },
        el('div', {}, el('h3', { style: 'display:inline', text: h.host }), local ? el('span', { class: 'kind', text: 'this host' }) : null),
        el('div', { class: 'badges' }, badge(lost ? 'lost' : 'up', lost ? 'bad' : 'ok', heartbeatText(h)))),
      el('div', { class: 'host-beat' + (lost ? ' error' : ' muted'), text: heartbeatText(h) }),
      el('div', { class: 'host-gpus' }, gpus),
      services.length
        ? el('div', { class: 'table-wrap' }, el('table', { class: 'host-services' },
          el('thead', {}, el('tr', {}, el('th', { text: 'Service' }), el('th', { text: 'State' }), el('th', { class: 'num', text: 'VRAM' }))),
          el('tbody', {}, services)))
        : el('p', { class: 'empty', text: 'No services.' }),
      el('div', { class: 'host-foot' },
        el('span', { class: 'host-leases', dataset: { granted, queued }, text: `${granted} granted · ${queued} queued` }),
        el('a', { class: 'btn', href: viewHash(local ? 'local' : h.host), text: local ? 'Open' : 'View' })));
  }

  // One other host, from its last snapshot: GPUs and holdings, services (read-only), leases.
  function renderRemote(name) {
    const h = hostRow(name);
    if (!h) {
      state.remote = null;
      $('cluster-view').replaceChildren(el('section', { class: 'panel' },
        el('p', { class: 'empty', text: `No host named ${name} shares this store.` })));
      return;
    }
    if (!state.remote || state.remote.host !== name) {
      const gpusRoot = el('div', { class: 'gpus', id: 'remote-gpus' });
      const servicesRoot = el('div', { class: 'services', id: 'remote-services' });
      const leasesRoot = el('div', { id: 'remote-leases' });
      const note = el('div', { class: 'readonly-note', id: 'readonly-note', role: 'note' });
      const leasesCount = el('span', { class: 'count' });
      state.remote = { host: name, gpus: new Map(), services: new Map(), gpusRoot, servicesRoot, leasesRoot, note, leasesCount };
      $('cluster-view').replaceChildren(note,
        el('div', { class: 'layout remote-layout' },
          el('div', { class: 'col-main' },
            el('section', { class: 'panel', 'aria-labelledby': 'remote-gpus-title' },
              el('div', { class: 'panel-head' }, el('h2', { id: 'remote-gpus-title', text: `GPU memory · ${name}` })), gpusRoot),
            el('section', { class: 'panel', 'aria-labelledby': 'remote-services-title' },
              el('div', { class: 'panel-head' }, el('h2', { id: 'remote-services-title', text: `Services · ${name}` })), servicesRoot)),
          el('div', { class: 'col-side' },
            el('section', { class: 'panel', 'aria-labelledby': 'remote-leases-title' },
              el('div', { class: 'panel-head' }, el('h2', { id: 'remote-leases-title', text: `Leases · ${name}` }), leasesCount), leasesRoot))));
    }
    const r = state.remote;
    const s = h.status || {};
    r.note.dataset.state = h.state;
    const age = fmtDuration((h.age_ms || 0) / 1000);
    r.note.replaceChildren(el('strong', { text: `${name}: ` }),
      (h.state === 'lost' ? `${heartbeatText(h)}; this is the last status it wrote. ` : `its last status, written ${age} ago. `) +
      `Read-only: this dashboard's actions act on this host only ` +
      `(${state.status && state.status.host ? state.status.host : location.host}); use ${name}'s own dashboard to unload, start or stop its services.`);
    // GPUs: the same cards as this host's, without the chart.
    const seen = new Set();
    for (const g of s.gpus || []) {
      seen.add(g.index);
      let gpu = r.gpus.get(g.index);
      if (!gpu) {
        gpu = makeGpu(g, true);
        r.gpus.set(g.index, gpu);
        r.gpusRoot.append(gpu.root);
      }
      updateGpu(gpu, g);
      gpu.historyNote = `Its history is kept by ${name}.`;
      updateNote(gpu);
    }
    for (const [i, gpu] of r.gpus) if (!seen.has(i)) { gpu.root.remove(); r.gpus.delete(i); }
    if (!r.gpus.size) r.gpusRoot.replaceChildren(el('p', { class: 'empty', text: h.status ? 'No GPU found.' : 'No status written yet.' }));
    else for (const e of r.gpusRoot.querySelectorAll(':scope > .empty')) e.remove();
    const names = new Set();
    for (const x of s.services || []) {
      names.add(x.name);
      let svc = r.services.get(x.name);
      if (!svc) {
        svc = makeService(x, name);
        r.services.set(x.name, svc);
        r.servicesRoot.append(svc.root);
      }
      updateService(svc, x);
    }
    for (const [n, svc] of r.services) if (!names.has(n)) { svc.root.remove(); r.services.delete(n); }
    if (!r.services.size) r.servicesRoot.replaceChildren(el('p', { class: 'empty', text: 'No services.' }));
    else for (const e of r.servicesRoot.querySelectorAll(':scope > .empty')) e.remove();
    const vl = state.viewLeases;
    const list = vl && !vl.error ? activeLeases(vl) : activeLeases(s);
    r.leasesCount.textContent = list.length ? `${list.length} active` : '';
    r.leasesRoot.replaceChildren(vl && vl.error ? el('p', { class: 'error', text: 'Leases: ' + vl.error }) : leaseTable(list, false));
  }

  // ---- polling ----

  let refreshTimer = null;
  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => { refreshAll(); for (const g of state.gpus.values()) loadHistory(g); }, 300);
  }

  async function guarded(fn) {
    try {
      await fn();
      return true;
    } catch (e) {
      if (e instanceof AuthNeeded) return false;
      throw e;
    }
  }

  let lastDoctor = 0;
  async function refreshAll() {
    if (state.needToken) return;
    try {
      // /v1/hosts: an older daemon, or a store that cannot be read, leaves the one-host view.
      const [status, services, leases, proxy, hosts] = await Promise.all([api('/v1/status'), api('/v1/services'), api('/v1/leases'), api('/v1/proxy'),
        api('/v1/hosts').catch((e) => { if (e instanceof AuthNeeded) throw e; return null; })]);
      state.hosts = hosts;
      await loadViewLeases();
      renderProxy(proxy);
      state.serviceNames = (services.services || []).map((x) => x.name);
      const present = new Set();
      for (const g of status.gpus || []) for (const h of g.holdings || []) present.add(h.owner);
      for (const gpu of state.gpus.values()) for (const o of (gpu.history ? gpu.history.series : [])) present.add(o.owner);
      forgetColors(present);
      renderGpus(status);
      renderServices(services.services || []);
      renderLeases(leases);
      renderHosts();
      showBanner(status.error ? 'GPU backend: ' + status.error : '');
      if (Date.now() - lastDoctor > 10000) {
        lastDoctor = Date.now();
        await guarded(async () => renderDoctor(await api('/v1/doctor')));
      }
    } catch (e) {
      if (e instanceof AuthNeeded) return;
      showBanner(e instanceof TypeError ? 'vramd is not reachable; retrying…' : 'Error: ' + e.message);
    }
  }

  // Everything, then the live feed: at start, and again once the user gave a token.
  async function connect() {
    await refreshAll();
    if (state.needToken) return;
    try { await loadEventHistory(); } catch (e) { /* the stream still runs */ }
    restartStream();
  }

  async function main() {
    state.view = viewFromHash();
    await connect();
    setInterval(refreshAll, 2000);
    setInterval(() => {
      const every = state.window === '15m' ? 5000 : 30000;
      for (const g of state.gpus.values()) {
        if (!g.loadedAt || Date.now() - g.loadedAt >= every) { g.loadedAt = Date.now(); loadHistory(g); }
      }
    }, 2500);
  }

  // For the browser tests (and a curious console): the state, and a way to cut the live feed
  // as a network drop would.
  window.vramdDashboard = { state, dropStream: () => streamAbort && streamAbort.abort() };
  main();
})();
