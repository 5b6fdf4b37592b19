// gsched dashboard: polls the JSON endpoints (/api/...) and renders workers, graph progress,
// the task stream and the transfer matrix. No external resources.
'use strict';
(function () {
  // at most MAX_DRAW task boxes (the newest) so that a million tiny tasks do not flood the page
  const POLL_MS = 500, WINDOW_S = 30, MAX_KEEP = 50000, MAX_DRAW = 4000;
  let since = 0, events = [], graphs = [], workers = [], lastNow = 0, failures = 0;
  const layerNames = new Map();   // "graph/layer" -> operation name

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function bytes(n) {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + u[i];
  }
  async function get(path) {
    const r = await fetch(path, { cache: 'no-store', credentials: 'same-origin' });
    if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
    return r.json();
  }

  function renderWorkers() {
    const tb = document.querySelector('#workers tbody');
    tb.replaceChildren();
    for (const w of workers) {
      const tr = el('tr', { class: 'worker-row', 'data-worker': w.id });
      const mem = w.memory.map(m => m.tier + ': ' + bytes(m.used) + ' / ' + (m.limit ? bytes(m.limit) : '?')).join(', ');
      const cells = [w.name, w.host, w.backend !== 'cpu' && w.device >= 0 ? String(w.device) : '-', w.nthreads, mem, w.tasks.running,
        w.tasks.queued, w.tasks.done, w.tasks.failed, bytes(w.bytes_in), bytes(w.bytes_out), w.ms_per_task.toFixed(3)];
      for (const c of cells) tr.appendChild(el('td', {}, String(c)));
      tb.appendChild(tr);
    }
  }

  function renderGraphs() {
    const box = document.getElementById('graphs');
    box.replaceChildren();
    if (!graphs.length) { box.appendChild(el('p', { class: 'empty' }, 'no graph yet')); return; }
    for (const g of graphs) {
      const div = el('div', { class: 'graph ' + g.phase, 'data-graph': g.id });
      const dur = (g.t_end !== null ? g.t_end : lastNow) - g.t_start;
      div.appendChild(el('div', { class: 'title' }, 'graph ' + g.id + ' (' + g.client + '): ' + g.phase + ', ' +
        g.done + ' / ' + g.total + ' tasks, ' + dur.toFixed(2) + ' s' + (g.error ? ': ' + g.error : '')));
      const rep = el('a', { href: '/report?graph=' + g.id, download: 'gsched-report-' + g.id + '.html' }, 'report');
      div.firstChild.append(' ', rep);
      for (const l of g.layers) {
        layerNames.set(g.id + '/' + l.index, l.name);
        if (!l.total) continue;
        const pct = 100 * l.done / l.total;
        const row = el('div', { class: 'op' });
        row.appendChild(el('span', {}, l.name + ' #' + l.index));
        const bar = el('div', { class: 'progress', 'data-pct': pct.toFixed(1), role: 'progressbar',
          'aria-valuenow': pct.toFixed(1), 'aria-valuemin': '0', 'aria-valuemax': '100' });
        const fill = el('div', { class: 'progress-fill' });
        fill.style.width = pct + '%';
        const run = el('div', { class: 'progress-run' });
        run.style.left = pct + '%';
        run.style.width = (100 * l.processing / l.total) + '%';
        bar.append(fill, run);
        if (l.erred) {
          const err = el('div', { class: 'progress-err' });
          err.style.width = (100 * l.erred / l.total) + '%';
          bar.appendChild(err);
        }
        row.appendChild(bar);
        row.appendChild(el('span', {}, l.done + ' / ' + l.total + ' (' + pct.toFixed(0) + ' %), ' + l.run_s.toFixed(2) + ' s'));
        div.appendChild(row);
      }
      box.appendChild(div);
    }
  }

  function renderStream() {
    const box = document.getElementById('stream'), legend = document.getElementById('legend');
    const t1 = lastNow, t0 = t1 - WINDOW_S, used = new Map();
    box.replaceChildren();
    events = events.filter(e => e.end >= t0);
    if (events.length > MAX_KEEP) events = events.slice(-MAX_KEEP);
    const drawn = events.length > MAX_DRAW ? events.slice(-MAX_DRAW) : events;
    for (const w of workers) {
      const mine = drawn.filter(e => e.worker === w.id).sort((a, b) => a.start - b.start);
      const nl = Math.max(1, w.nthreads), lanes = [], ends = new Array(nl).fill(-Infinity);
      for (let i = 0; i < nl; i++) {
        const lane = el('div', { class: 'lane', 'data-worker': w.id, 'data-lane': i });
        lane.appendChild(el('span', { class: 'lane-label' }, w.name + ' #' + i));
        lanes.push(lane);
        box.appendChild(lane);
      }
      for (const e of mine) {
        let k = ends.findIndex(x => x <= e.start);
        if (k < 0) k = ends.indexOf(Math.min(...ends));
        ends[k] = e.end;
        const name = layerNames.get(e.graph + '/' + e.layer) || ('layer ' + e.layer);
        const d = el('div', { class: 'task', title: name + ': graph ' + e.graph + ' task ' + e.task + ', ' +
          ((e.end - e.start) * 1e3).toFixed(3) + ' ms' });
        d.style.left = (100 * (Math.max(e.start, t0) - t0) / WINDOW_S) + '%';
        d.style.width = (100 * (e.end - Math.max(e.start, t0)) / WINDOW_S) + '%';
        d.style.background = e.status === 0 ? gsColour(name) : '#000';
        used.set(name, gsColour(name));
        lanes[k].appendChild(d);
      }
    }
    legend.replaceChildren();
    for (const [name, c] of used) {
      const s = el('span', {}, name);
      const i = el('i');
      i.style.background = c;
      s.prepend(i);
      legend.appendChild(s);
    }
  }

  function renderTransfers(xf) {
    const table = document.getElementById('transfers');
    const names = new Map(workers.map(w => [w.id, w.name]));
    table.tHead.replaceChildren();
    table.tBodies[0].replaceChildren();
    const hr = el('tr');
    for (const h of ['from', 'to', 'path', 'GB/s (recent)', 'GB/s (mean)', 'moved', 'chunks']) hr.appendChild(el('th', {}, h));
    table.tHead.appendChild(hr);
    for (const x of xf.transfers) {
      const tr = el('tr', { class: 'xfer-row' });
      for (const c of [names.get(x.from) || x.from, names.get(x.to) || x.to, x.path, x.recent_gbps.toPrecision(3),
        x.gbps.toPrecision(3), bytes(x.bytes), x.count]) tr.appendChild(el('td', {}, String(c)));
      table.tBodies[0].appendChild(tr);
    }
  }

  async function poll() {
    try {
      const [w, g, t, x] = await Promise.all([get('/api/workers'), get('/api/graphs'),
        get('/api/tasks?since=' + since), get('/api/transfers')]);
      workers = w.workers;
      graphs = g.graphs;
      lastNow = Math.max(w.now, g.now, t.now);
      events.push(...t.tasks);
      since = t.next;
      renderWorkers();
      renderGraphs();
      renderStream();
      renderTransfers(x);
      const running = graphs.filter(q => q.phase === 'running').length;
      document.getElementById('summary').textContent = workers.length + ' workers, ' + running + ' graphs running';
      document.getElementById('status').textContent = '';
      document.getElementById('status').className = 'status';
      document.body.setAttribute('data-polls', String(Number(document.body.getAttribute('data-polls') || 0) + 1));
      failures = 0;
    } catch (err) {
      failures++;
      const s = document.getElementById('status');
      s.textContent = 'update failed: ' + err.message;
      s.className = 'status stale';
    }
    setTimeout(poll, failures ? Math.min(5000, POLL_MS * 2 ** failures) : POLL_MS);
  }
  document.getElementById('window').textContent = WINDOW_S;
  poll();
})();
