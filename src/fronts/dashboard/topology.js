// The topology section of the /stats page of `mesh api` (docs/dashboard.md, "Topology"): polls
// stats/topology every 3 s and draws the services and the caller → service edges as SVG, with the
// figures of the last window on each edge; a click on a service (or Enter on it) shows its golden
// metrics. Every name comes from the registry or an admin: it is set as text, never as markup.
//
// For tests and scripts the page exposes what it shows as DOM data:
//   #topology[data-updates]       answers drawn so far; [data-state] ok|unreachable; [data-render-ms] the last drawing
//   g.edge[data-from][data-to]    one edge; data-rps, data-success, data-p99, data-mtls (as in the JSON; '' for null)
//   g.node[data-name]             one service or process; data-status ok|down (a process of that name could not be read)
'use strict';
(function () {
  const SVG = 'http://www.w3.org/2000/svg';
  const POLL_MS = 3000;
  const NODE_W = 230;
  const COL_W = 580;
  const LINE = 18;
  const PAD = 14;
  const MAX_LABEL = 34;

  const section = document.getElementById('topology');
  if (!section) return;
  const svg = document.getElementById('topology-graph');
  const detail = document.getElementById('topology-detail');
  const down = document.getElementById('topology-down');
  const summary = document.getElementById('topology-summary');
  let updates = 0;
  let selected = null;
  let last = null;

  const el = (name, attrs, text) => {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const html = (name, text, cls) => {
    const e = document.createElement(name);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  };
  const short = (s) => (s.length > MAX_LABEL ? s.slice(0, MAX_LABEL - 1) + '…' : s);
  const pct = (x) => (x === null ? '–' : `${(Math.floor(x * 1000) / 10).toFixed(1)}%`);
  const ms = (x) => (x === null ? '–' : `${x} ms`);
  const rate = (x) => (x === null ? '–' : x.toFixed(1));
  const attr = (x) => (x === null ? '' : String(x));
  const health = (f) => (f.requests === 0 || f.success === null ? 'idle' : f.success >= 0.99 ? 'good' : f.success >= 0.95 ? 'warn' : 'bad');
  const edgeLabel = (e) => (e.requests === 0 ? 'idle: no call in this window' : `${rate(e.rps)} rps · ${pct(e.success)} · p99 ${ms(e.p99_ms)} · mTLS ${pct(e.mtls)}`);

  /** Columns by distance from the callers nobody calls (a node only in a cycle: column 0). */
  function columns(nodes, edges) {
    const out = new Map(nodes.map((n) => [n, []]));
    const called = new Set();
    for (const e of edges) {
      out.get(e.from).push(e.to);
      if (e.from !== e.to) called.add(e.to);
    }
    const depth = new Map();
    let frontier = nodes.filter((n) => !called.has(n));
    for (const n of frontier) depth.set(n, 0);
    for (let d = 1; frontier.length > 0; d++) {
      const next = [];
      for (const n of frontier) {
        for (const to of out.get(n)) {
          if (!depth.has(to)) {
            depth.set(to, d);
            next.push(to);
          }
        }
      }
      frontier = next;
    }
    for (const n of nodes) if (!depth.has(n)) depth.set(n, 0);
    return depth;
  }

  function draw(json) {
    const started = performance.now();
    const nodes = json.nodes;
    const edges = json.edges.filter((e) => nodes.includes(e.from) && nodes.includes(e.to));
    const depth = columns(nodes, edges);
    const downNames = new Set(json.processes.filter((p) => p.status !== 'ok').map((p) => p.name || p.kind));
    const incoming = new Map(nodes.map((n) => [n, []]));
    for (const e of edges) incoming.get(e.to).push(e);
    // Place: one column per depth, a node as tall as the edge labels it receives.
    const pos = new Map();
    const colY = [];
    for (const n of nodes) {
      const d = depth.get(n);
      const y = colY[d] ?? PAD;
      const h = Math.max(1, incoming.get(n).length) * LINE + PAD;
      pos.set(n, { x: PAD + d * COL_W, y, h });
      colY[d] = y + h + PAD;
    }
    const width = PAD * 2 + Math.max(0, colY.length - 1) * COL_W + NODE_W;
    const height = Math.max(PAD * 2, ...colY);
    svg.replaceChildren();
    svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
    svg.setAttribute('width', String(width));
    svg.setAttribute('height', String(height));
    const edgeLayer = el('g', { class: 'edges' });
    const nodeLayer = el('g', { class: 'nodes' });
    svg.append(edgeLayer, nodeLayer);
    for (const [to, list] of incoming) {
      const t = pos.get(to);
      list.forEach((e, k) => {
        const f = pos.get(e.from);
        const x1 = f.x + NODE_W;
        const y1 = f.y + f.h / 2;
        const x2 = t.x;
        const y2 = t.y + PAD / 2 + LINE * k + LINE / 2;
        const bend = Math.max(40, Math.abs(x2 - x1) / 2);
        const g = el('g', {
          class: `edge ${health(e)}`,
          'data-from': e.from,
          'data-to': e.to,
          'data-requests': e.requests,
          'data-rps': attr(e.rps),
          'data-success': attr(e.success),
          'data-p99': attr(e.p99_ms),
          'data-mtls': attr(e.mtls),
        });
        g.append(el('path', { d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`, 'marker-end': 'url(#topology-arrow)' }));
        const label = el('text', { x: x2 - 8, y: y2 - 3, 'text-anchor': 'end' }, edgeLabel(e));
        g.append(label, el('title', {}, `${e.from} → ${e.to}: ${e.requests} requests`));
        edgeLayer.append(g);
      });
    }
    for (const n of nodes) {
      const p = pos.get(n);
      const g = el('g', { class: `node${n === selected ? ' selected' : ''}${downNames.has(n) ? ' down' : ''}`, 'data-name': n, 'data-status': downNames.has(n) ? 'down' : 'ok', tabindex: 0, role: 'button' });
      g.append(el('rect', { x: p.x, y: p.y, width: NODE_W, height: p.h, rx: 6 }));
      g.append(el('text', { x: p.x + 10, y: p.y + p.h / 2 + 5 }, short(n)));
      g.append(el('title', {}, n));
      g.addEventListener('click', () => select(n));
      g.addEventListener('keydown', (ev) => (ev.key === 'Enter' || ev.key === ' ') && select(n));
      nodeLayer.append(g);
    }
    const defs = el('defs');
    const marker = el('marker', { id: 'topology-arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto' });
    marker.append(el('path', { d: 'M0,0 L10,5 L0,10 z' }));
    defs.append(marker);
    svg.prepend(defs);
    section.dataset.renderMs = String(Math.round((performance.now() - started) * 10) / 10);
  }

  function drawDown(json) {
    const failed = json.processes.filter((p) => p.status !== 'ok');
    down.replaceChildren(...failed.map((p) => html('li', `${p.kind}${p.name ? ` ${p.name}` : ''} (admin ${p.admin}): ${p.status}`)));
    down.hidden = failed.length === 0;
    const window = json.since_start ? 'since the processes started' : `over the last ${json.window_s.toFixed(1)} s`;
    summary.textContent = `${json.processes.length - failed.length} of ${json.processes.length} process(es) read, ${json.edges.length} edge(s), ${window}`;
  }

  function select(name) {
    selected = name;
    for (const g of svg.querySelectorAll('g.node')) g.classList.toggle('selected', g.dataset.name === name);
    drawDetail();
  }

  function drawDetail() {
    if (!selected || !last) {
      detail.hidden = true;
      return;
    }
    const json = last;
    const name = selected;
    detail.hidden = false;
    detail.dataset.name = name;
    const head = html('h3', name);
    const service = json.services.find((s) => s.name === name);
    const rows = [];
    if (service) {
      rows.push(['Requests', String(service.requests)], ['Requests/s', rate(service.rps)], ['Success rate', pct(service.success)]);
      rows.push(['p50 / p95 / p99', `${ms(service.p50_ms)} / ${ms(service.p95_ms)} / ${ms(service.p99_ms)}`], ['mTLS', pct(service.mtls)]);
    }
    const dl = html('dl');
    for (const [k, v] of rows) {
      const div = html('div');
      div.dataset.metric = k;
      div.append(html('dt', k), html('dd', v));
      dl.append(div);
    }
    const parts = [head];
    if (service) parts.push(dl);
    else parts.push(html('p', 'Not called in this window: no golden metrics.', 'empty'));
    const list = (title, edges, other) => {
      if (edges.length === 0) return;
      parts.push(html('h4', title));
      const ul = html('ul');
      for (const e of edges) ul.append(html('li', `${other(e)}: ${edgeLabel(e)}`));
      parts.push(ul);
    };
    list('Callers', json.edges.filter((e) => e.to === name), (e) => e.from);
    list('Calls', json.edges.filter((e) => e.from === name), (e) => e.to);
    const procs = json.processes.filter((p) => (p.name || p.kind) === name);
    if (procs.length > 0) {
      parts.push(html('h4', 'Processes'));
      const ul = html('ul');
      for (const p of procs) ul.append(html('li', `${p.kind} ${p.id} (admin ${p.admin}): ${p.status}`));
      parts.push(ul);
    }
    detail.replaceChildren(...parts);
  }

  async function poll() {
    try {
      const res = await fetch('stats/topology', { headers: { accept: 'application/json' }, cache: 'no-store' });
      if (res.status === 404) {
        section.hidden = true;
        return;
      }
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const json = await res.json();
      last = json;
      section.hidden = false;
      draw(json);
      drawDown(json);
      drawDetail();
      updates++;
      section.dataset.updates = String(updates);
      section.dataset.state = 'ok';
    } catch (err) {
      section.dataset.state = 'unreachable';
      summary.textContent = `topology unavailable: ${err.message}`;
    }
    setTimeout(poll, POLL_MS);
  }

  poll();
})();
