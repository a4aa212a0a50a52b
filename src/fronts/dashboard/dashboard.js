// The /stats page of mesh (docs/dashboard.md): polls the same URL for JSON every window (1 s)
// and draws it with uPlot (served by the process under stats/assets/). No framework, no CDN.
//
// For tests and scripts the page exposes what it shows as DOM data:
//   body[data-updates]            answers applied so far; body[data-state] live|draining|unreachable
//   [data-total=<key>]            totals (total, 1xx..5xx, active), the admin /stats counters
//   figure[data-chart=<name>]     (upstream: only with --stats_histograms) data-points (windows drawn), data-series (labels, comma-separated),
//                                 data-sums (JSON: per series, the sum of the window counts/values)
/* global uPlot */
'use strict';
(function () {
  const COLORS = { '1xx': '#6a1b9a', '2xx': '#2e7d32', '3xx': '#1565c0', '4xx': '#ef6c00', '5xx': '#c62828' };
  const MiB = 1024 * 1024;
  const round = (v, d) => (v === null || v === undefined || Number.isNaN(v) ? null : Math.round(v * 10 ** d) / 10 ** d);

  // Each chart: its series (label, colour) and how to read one window into the y values; `sum`
  // gives the per-series figure the data-sums attribute reports (counts for requests).
  const CHARTS = {
    requests: {
      unit: 'req/s',
      series: ['2xx', '3xx', '4xx', '5xx'].map((c) => ({ label: c, stroke: COLORS[c], fill: COLORS[c] + '14' })),
      y: (w) => ['2xx', '3xx', '4xx', '5xx'].map((c) => round(w.status_codes[c] / (w.duration_ms / 1000), 2)),
      sum: (w) => ['2xx', '3xx', '4xx', '5xx'].map((c) => w.status_codes[c]),
    },
    latency: {
      unit: 'ms',
      points: true,
      series: [
        { label: 'p50', stroke: '#1565c0' },
        { label: 'p99', stroke: '#c62828' },
      ],
      y: (w) => [w.latency_ms.p50, w.latency_ms.p99],
    },
    errors: {
      unit: '%',
      series: [
        { label: '5xx %', stroke: COLORS['5xx'], fill: COLORS['5xx'] + '22' },
        { label: '4xx %', stroke: COLORS['4xx'] },
      ],
      y: (w) => (w.requests ? [round((100 * w.status_codes['5xx']) / w.requests, 1), round((100 * w.status_codes['4xx']) / w.requests, 1)] : [null, null]),
      sum: (w) => [w.status_codes['5xx'], w.status_codes['4xx']],
    },
    memory: {
      unit: 'MiB',
      series: [
        { label: 'rss', stroke: '#455a64' },
        { label: 'heap used', stroke: '#00897b' },
      ],
      y: (w) => [round(w.memory.rss / MiB, 1), round(w.memory.heap_used / MiB, 1)],
    },
    loop: {
      unit: 'ms',
      series: [
        { label: 'p50', stroke: '#1565c0' },
        { label: 'p99', stroke: '#ef6c00' },
        { label: 'max', stroke: '#9e9e9e', dash: [4, 4] },
      ],
      y: (w) => (w.event_loop_delay_ms ? [w.event_loop_delay_ms.p50, w.event_loop_delay_ms.p99, w.event_loop_delay_ms.max] : [null, null, null]),
    },
  };

  // With --stats_histograms (json.histograms) one more chart: p50 (dashed) and p99 of each
  // cluster's upstream attempts, one colour per cluster; rebuilt when the set of clusters changes.
  const PALETTE = ['#1565c0', '#2e7d32', '#6a1b9a', '#ef6c00', '#00897b', '#c62828', '#455a64', '#ad1457', '#9e9d24', '#5d4037'];
  const MAX_UPSTREAM = 10;
  function upstreamSpec(names) {
    const series = [];
    names.forEach((n, i) => {
      const stroke = PALETTE[i % PALETTE.length];
      series.push({ label: `${n} p50`, stroke, dash: [4, 4] });
      series.push({ label: `${n} p99`, stroke });
    });
    return {
      unit: 'ms',
      // a cluster called now and then has windows without attempts: show the lone values as dots
      points: true,
      series,
      y: (w) =>
        names.flatMap((n) => {
          const q = w.clusters_latency_ms && w.clusters_latency_ms[n];
          return q ? [q.p50, q.p99] : [null, null];
        }),
    };
  }

  const charts = {};
  let updates = 0;
  let upstreamKey = null;
  // The x axis ends at the newest window and spans the windows drawn: at least 30 s, at most
  // what the process keeps (two minutes).
  let span = 30;
  let newest = null;
  function xRange(min, max) {
    const end = newest === null ? (max ?? Date.now() / 1000) : newest;
    return [end - span, end];
  }

  function plotWidth(el) {
    return Math.max(280, Math.floor(el.clientWidth || el.parentElement.clientWidth || 400));
  }

  function makeChart(name, spec) {
    const figure = document.querySelector(`figure[data-chart="${name}"]`);
    const el = figure.querySelector('.plot');
    figure.dataset.series = spec.series.map((s) => s.label).join(',');
    figure.dataset.points = '0';
    const opts = {
      width: plotWidth(el),
      height: 200,
      scales: { x: { time: true, range: (u, min, max) => xRange(min, max) }, y: { range: (u, min, max) => [0, Math.max(max || 0, name === 'errors' ? 5 : 1) * 1.1] } },
      axes: [{}, { label: spec.unit, size: 56 }],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      series: [{}].concat(spec.series.map((s) => ({ label: s.label, stroke: s.stroke, fill: s.fill, dash: s.dash, width: 2, spanGaps: false, points: spec.points ? { show: true, size: 5 } : { show: false } }))),
    };
    const data = [[]].concat(spec.series.map(() => []));
    const plot = new uPlot(opts, data, el);
    charts[name] = { figure, el, plot, spec, fresh: true };
  }

  // Adds, rebuilds or removes the upstream chart; updateChart then fills it like the others.
  function renderUpstream(json) {
    let figure = document.querySelector('figure[data-chart="upstream"]');
    if (!json.histograms) {
      if (charts.upstream) charts.upstream.plot.destroy();
      delete charts.upstream;
      if (figure) figure.remove();
      upstreamKey = null;
      return;
    }
    const names = [...new Set(json.counters.flatMap((w) => Object.keys(w.clusters_latency_ms || {})))].sort().slice(0, MAX_UPSTREAM);
    if (!figure) {
      figure = document.createElement('figure');
      figure.dataset.chart = 'upstream';
      const caption = document.createElement('figcaption');
      caption.textContent = 'Upstream latency by cluster, p50 (dashed) and p99 (ms)';
      const plot = document.createElement('div');
      plot.className = 'plot';
      figure.append(caption, plot);
      document.querySelector('figure[data-chart="latency"]').after(figure);
    }
    const key = names.join('\n');
    if (key === upstreamKey) return;
    if (charts.upstream) charts.upstream.plot.destroy();
    figure.querySelector('.plot').replaceChildren();
    makeChart('upstream', upstreamSpec(names));
    upstreamKey = key;
  }

  function updateChart(chart, windows) {
    const xs = [];
    const ys = chart.spec.series.map(() => []);
    const sums = chart.spec.series.map(() => 0);
    for (const w of windows) {
      xs.push(w.timestamp);
      chart.spec.y(w).forEach((v, i) => ys[i].push(v));
      const s = chart.spec.sum ? chart.spec.sum(w) : chart.spec.y(w);
      s.forEach((v, i) => (sums[i] += v || 0));
    }
    chart.plot.setData([xs].concat(ys));
    // Without the cursor over the chart, the legend shows the newest window's values.
    if (xs.length && chart.plot.cursor.idx == null) {
      const idx = xs.length - 1;
      chart.plot.setLegend({ idx });
      // a chart made in this same task ignores it until uPlot has drawn once
      if (chart.fresh) setTimeout(() => chart.plot.cursor.idx == null && chart.plot.setLegend({ idx }), 0);
    }
    chart.fresh = false;
    chart.figure.dataset.points = String(xs.length);
    const named = {};
    chart.spec.series.forEach((s, i) => (named[s.label] = round(sums[i], 3)));
    chart.figure.dataset.sums = JSON.stringify(named);
  }

  const text = (sel, value) => {
    for (const el of document.querySelectorAll(sel)) el.textContent = value;
  };

  function duration(s) {
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    return (d ? `${d}d ` : '') + (d || h ? `${h}h ` : '') + (d || h || m ? `${m}m ` : '') + `${s % 60}s`;
  }

  const ms = (v) => (v === null || v === undefined ? '–' : `${v} ms`);
  const pct = (v) => (v === null || v === undefined ? '–' : `${v.toFixed(v === 100 ? 0 : 1)}%`);

  function td(row, value, cls) {
    const cell = document.createElement('td');
    cell.textContent = value;
    if (cls) cell.className = cls;
    row.appendChild(cell);
    return cell;
  }

  function renderClusters(json) {
    const body = document.querySelector('#clusters tbody');
    const rows = [];
    for (const c of json.clusters) {
      const hosts = c.hosts.length ? c.hosts : [null];
      hosts.forEach((h, i) => {
        const row = document.createElement('tr');
        row.dataset.cluster = c.name;
        if (i === 0) row.className = 'cluster-first';
        td(row, i === 0 ? `${c.name} (${c.hosts_healthy}/${c.hosts_total} healthy${c.hosts_mtls > 0 ? `, ${c.hosts_mtls}/${c.hosts_total} mTLS` : ''})` : '');
        if (!h) {
          td(row, 'no hosts', 'empty').colSpan = 7;
        } else {
          row.dataset.host = h.address;
          td(row, h.hostname && h.hostname !== h.address.replace(/:\d+$/, '') ? `${h.address} (${h.hostname})` : h.address);
          td(row, h.health, `health ${h.healthy ? 'healthy' : 'unhealthy'}`);
          const sr = td(row, pct(h.success_rate), 'num');
          sr.dataset.successRate = h.success_rate === null ? '' : String(h.success_rate);
          if (h.success_rate_source) sr.title = h.success_rate_source === 'outlier_interval' ? 'outlier detection, last interval' : 'since start';
          td(row, String(h.rq_total), 'num');
          td(row, String(h.rq_error), 'num');
          td(row, String(h.rq_active), 'num');
          td(row, String(h.weight), 'num');
        }
        rows.push(row);
      });
    }
    if (rows.length === 0) {
      const row = document.createElement('tr');
      td(row, 'No upstream cluster yet: a cluster appears on the first call to a service.', 'empty').colSpan = 8;
      rows.push(row);
    }
    body.replaceChildren(...rows);
    text('#clusters-count', json.clusters_total > json.clusters.length ? `(first ${json.clusters.length} of ${json.clusters_total})` : `(${json.clusters_total})`);
  }

  function apply(json) {
    document.title = `${json.name} stats`;
    text('#name', json.name);
    const state = document.getElementById('state');
    state.textContent = json.state;
    state.className = `badge ${json.state}`;
    document.body.dataset.state = json.state;
    text('[data-field="version"]', json.version);
    text('[data-field="started"]', new Date(json.started * 1000).toLocaleString());
    text('[data-field="uptime"]', duration(json.uptime));
    text('[data-field="updated"]', new Date(json.timestamp * 1000).toLocaleTimeString());
    for (const el of document.querySelectorAll('[data-total]')) {
      const v = json.totals[el.dataset.total];
      el.textContent = String(v);
      el.dataset.value = String(v);
    }
    text('[data-field="latency"]', json.latency_ms.p50 === null ? '–' : `${json.latency_ms.p50} / ${json.latency_ms.p99} ms`);
    text('[data-field="memory"]', `${(json.memory.rss / MiB).toFixed(1)} MiB`);
    text('[data-field="loop"]', ms(json.event_loop_delay_ms && round(json.event_loop_delay_ms.p99, 1)));
    text('#prefix', `${json.stat_prefix}downstream_rq_*`);
    for (const [label, value] of Object.entries(json.extra || {})) {
      let b = document.querySelector(`[data-extra="${CSS.escape(label)}"]`);
      if (!b) {
        const tile = document.createElement('div');
        tile.className = 'tile';
        const l = document.createElement('span');
        l.className = 'label';
        l.textContent = label;
        b = document.createElement('b');
        b.dataset.extra = label;
        tile.append(l, b);
        document.querySelector('.totals').appendChild(tile);
      }
      b.textContent = String(value);
    }
    const n = json.counters.length;
    newest = n ? json.counters[n - 1].timestamp : json.timestamp;
    const kept = (json.windows_kept || 120) * (json.interval || 1);
    span = Math.min(kept, Math.max(30, n ? newest - json.counters[0].timestamp + (json.interval || 1) : 0));
    renderUpstream(json);
    for (const chart of Object.values(charts)) updateChart(chart, json.counters);
    renderClusters(json);
    updates++;
    document.body.dataset.updates = String(updates);
  }

  let intervalMs = 1000;
  async function poll() {
    try {
      const res = await fetch(location.pathname, { headers: { accept: 'application/json' }, cache: 'no-store' });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const json = await res.json();
      intervalMs = Math.max(500, (json.interval || 1) * 1000);
      apply(json);
    } catch (err) {
      const state = document.getElementById('state');
      state.textContent = 'unreachable';
      state.className = 'badge down';
      state.title = String(err);
      document.body.dataset.state = 'unreachable';
    } finally {
      setTimeout(poll, intervalMs);
    }
  }

  function start() {
    for (const [name, spec] of Object.entries(CHARTS)) makeChart(name, spec);
    let pending = 0;
    window.addEventListener('resize', () => {
      clearTimeout(pending);
      pending = setTimeout(() => {
        for (const c of Object.values(charts)) c.plot.setSize({ width: plotWidth(c.el), height: 200 });
      }, 100);
    });
    poll();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
