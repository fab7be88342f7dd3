// The monitor's plot in the browser: one device's bands and lines, drawn with plotly.js.
//
// The kernel sends the whole figure once (the `figure` trait: series, points, cell and named
// markers) and then only what is new, as custom messages: {kind: "append", t, y},
// {kind: "cells", cells} and {kind: "markers", markers}.
// This side keeps the window (drops points older than it), thins old points past max_points
// by the kernel's rule (each series' extremes stay), and follows JupyterLab's theme. It sends
// the kernel nothing but one request for plotly.js per page and kernel. The named exports are
// for the unit tests; anywidget uses the default one.

const STORES = (globalThis.__gpumemMonitorStores ??= new Map());

// plotly.js arrives as text, once per kernel, in the widget the `library` trait names; it is
// run once per page. Where the front end names no cell (nbconvert), the kernel leaves it out of
// the widget's state and sends it when a plot asks (the one message this side ever sends), so
// a notebook run without a browser does not keep it in its saved widget state.
function plotlyText(library) {
  const text = library.get('plotly_js');
  if (text) {
    return Promise.resolve(text);
  }
  return new Promise(resolve => {
    library.once('change:plotly_js', () => resolve(library.get('plotly_js')));
    library.send({ ask: 'plotly_js' });
  });
}

async function loadPlotly(model) {
  const id = model.get('library').replace(/^IPY_MODEL_/, '');
  const library = await model.widget_manager.get_model(id);
  const url = URL.createObjectURL(new Blob([await plotlyText(library)], { type: 'text/javascript' }));
  try {
    await import(/* webpackIgnore: true */ url);
  } finally {
    URL.revokeObjectURL(url);
  }
  return globalThis.Plotly;
}

function plotlyFrom(model) {
  if (globalThis.Plotly) {
    return Promise.resolve(globalThis.Plotly);
  }
  if (!globalThis.__gpumemPlotly) {
    globalThis.__gpumemPlotly = loadPlotly(model).catch(err => {
      globalThis.__gpumemPlotly = null; // the next plot tries again
      throw err;
    });
  }
  return globalThis.__gpumemPlotly;
}

// Epoch seconds to the number plotly's date axis shows as the browser's local clock time.
function localMs(t) {
  const ms = t * 1000;
  return ms - new Date(ms).getTimezoneOffset() * 60000;
}

const EMPTY = {
  series: [],
  t: [],
  y: {},
  cells: [],
  markers: [],
  labels: [],
  lower: false,
  top: 1,
  window_s: 600,
  max_points: 2000,
  unit: 'GiB'
};

export function storeFrom(given) {
  const figure = { ...EMPTY, ...given };
  const store = {
    figure,
    t: [...(figure.t || [])],
    y: {},
    cells: figure.cells || [],
    markers: figure.markers || [],
    rev: 0
  };
  store.x = store.t.map(localMs);
  for (const s of figure.series || []) {
    store.y[s.name] = [...((figure.y || {})[s.name] || [])];
  }
  return store;
}

// The kernel's thinning (series.decimate_rows) for rows lo..hi-1: at most maxRows of them. The
// rows are split into equal buckets; from each, the rows holding each series' minimum and
// maximum are kept, and the first and last rows always. Whole rows, so the stacked bands agree
// at every x, and a series' peak (a spike before an OOM) never disappears.
export function extremeRows(columns, lo, hi, maxRows) {
  const n = hi - lo;
  if (n <= maxRows) {
    return Array.from({ length: n }, (_, i) => lo + i);
  }
  let buckets = Math.max(1, Math.floor((maxRows - 2) / 2));
  for (;;) {
    const picks = new Set([lo, hi - 1]);
    for (let b = 0; b < buckets; b++) {
      const from = lo + Math.floor((b * n) / buckets);
      const to = lo + Math.floor(((b + 1) * n) / buckets);
      for (const col of columns) {
        let least = -1;
        let most = -1;
        for (let i = from; i < to; i++) {
          const v = col[i];
          if (v === null || v === undefined) {
            continue;
          }
          if (least < 0 || v < col[least]) {
            least = i;
          }
          if (most < 0 || v > col[most]) {
            most = i;
          }
        }
        if (least >= 0) {
          picks.add(least);
          picks.add(most);
        }
      }
    }
    if (picks.size <= maxRows || buckets === 1) {
      return [...picks].sort((a, b) => a - b);
    }
    // Too many distinct extremes: fewer, wider buckets (one keeps at most 2 per series + 2).
    buckets = Math.max(1, Math.floor((buckets * maxRows) / picks.size) - 1);
  }
}

// Keep the window, and at most max_points: past it, the older half is thinned to half as many
// rows by extremeRows; the newer half stays whole.
function trim(store) {
  const { window_s, max_points } = store.figure;
  const n = store.t.length;
  const last = store.t[n - 1];
  let drop = 0;
  while (drop < n && store.t[drop] < last - window_s) {
    drop += 1;
  }
  let rows;
  if (n - drop > max_points) {
    const half = drop + Math.floor((n - drop) / 2);
    const older = extremeRows(Object.values(store.y), drop, half, Math.ceil((half - drop) / 2));
    rows = older.concat(Array.from({ length: n - half }, (_, i) => half + i));
  } else if (drop) {
    rows = Array.from({ length: n - drop }, (_, i) => drop + i);
  } else {
    return;
  }
  const pick = a => rows.map(i => a[i]);
  store.t = pick(store.t);
  store.x = pick(store.x);
  for (const name of Object.keys(store.y)) {
    store.y[name] = pick(store.y[name]);
  }
}

export function append(store, msg) {
  for (let i = 0; i < msg.t.length; i++) {
    store.t.push(msg.t[i]);
    store.x.push(localMs(msg.t[i]));
    for (const name of Object.keys(store.y)) {
      store.y[name].push(((msg.y || {})[name] || [])[i] ?? null);
    }
  }
  trim(store);
}

function themeColors() {
  const css = getComputedStyle(document.body);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {
    paper: v('--jp-layout-color0', '#ffffff'),
    text: v('--jp-ui-font-color1', '#222222'),
    muted: v('--jp-ui-font-color2', '#555555'),
    grid: v('--jp-border-color2', '#e5e5e5')
  };
}

// Bytes arrive in the figure's unit: GiB for a GPU, MiB for the CPU view's arrays.
const bytesHover = unit => `%{y:.2f} ${unit}<extra>`;

function traceFor(spec, store, theme) {
  // "fg": drawn in the theme's text colour (black on white would vanish on a dark theme).
  const color = spec.color === 'fg' ? theme.text : spec.color;
  const BYTES_HOVER = bytesHover(store.figure.unit);
  const trace = {
    type: 'scatter',
    mode: 'lines',
    x: store.x,
    y: store.y[spec.name],
    name: spec.label,
    legendgroup: spec.name,
    legendrank: spec.rank,
    meta: spec.name,
    xaxis: 'x'
  };
  if (spec.kind === 'band') {
    Object.assign(trace, {
      stackgroup: 'bands',
      line: { width: 0.5, color },
      fillcolor: color,
      yaxis: 'y',
      hovertemplate: BYTES_HOVER + spec.label + '</extra>'
    });
  } else {
    trace.line = { width: 1.5, color, dash: spec.dash || 'solid' };
    trace.yaxis = spec.axis;
    trace.hovertemplate =
      spec.axis === 'y3' ? '%{y:.1f}%<extra>fragmentation</extra>' : BYTES_HOVER + spec.label + '</extra>';
    if (spec.kind === 'pool') {
      trace.line.shape = 'hv'; // each growth step shows as a step
    }
  }
  return trace;
}

// The cells in the window, each with its label ("[12]") and whether the label is shown in a plot
// `widthPx` wide: from the newest back, a label that would touch the last one shown (its
// characters at CELL_LABEL_CHAR_PX each, centred on its line, CELL_LABEL_PAD_PX apart) is left
// to its line's hover, so cells run close together never print "[7][9][1[1]2]".
const CELL_LABEL_CHAR_PX = 6; // a bracket or digit at the labels' 10 px font, a little over
const CELL_LABEL_PAD_PX = 4;

export function cellLabelsInView(store, widthPx) {
  const n = store.t.length;
  if (!n) {
    return [];
  }
  const first = store.t[0];
  const perPx = (store.t[n - 1] - first) / Math.max(widthPx, 1);
  const out = [];
  for (const [t, count, took] of store.cells) {
    if (t >= first) {
      // from before the first sample: nothing to mark it against
      out.push({ t, took, label: count === null ? '[?]' : `[${count}]`, shown: false });
    }
  }
  let shown = null;
  for (let i = out.length - 1; i >= 0; i--) {
    const c = out[i];
    const gapPx = shown && ((c.label.length + shown.label.length) / 2) * CELL_LABEL_CHAR_PX + CELL_LABEL_PAD_PX;
    c.shown = shown === null || shown.t - c.t >= gapPx * perPx;
    shown = c.shown ? c : shown;
  }
  return out;
}

// The cell markers: a dotted line per cell run (hover: how long it ran) and, in a trace of its
// own, the labels cellLabelsInView shows, at the top. One trace of both, with the bottom points'
// labels left empty, lost the first cell's label (plotly drew it nowhere).
function cellsTraces(store, theme, widthPx) {
  const top = store.figure.top || 1;
  const x = [];
  const y = [];
  const text = [];
  const labels = { x: [], y: [], text: [] };
  for (const { t, took, label, shown } of cellLabelsInView(store, widthPx)) {
    const ms = localMs(t);
    const ran = label + (took === null ? ' running' : ` ran ${took.toFixed(1)} s`);
    x.push(ms, ms, null);
    y.push(0, top, null);
    text.push(ran, ran, null);
    if (shown) {
      labels.x.push(ms);
      labels.y.push(top);
      labels.text.push(label);
    }
  }
  const lines = {
    type: 'scatter',
    mode: 'lines',
    x,
    y,
    text,
    line: { width: 1, color: theme.muted, dash: 'dot' },
    name: 'cells',
    legendgroup: 'cells',
    legendrank: 100,
    meta: 'cells',
    hovertemplate: 'cell %{text}<extra></extra>',
    xaxis: 'x',
    yaxis: 'y'
  };
  const tops = {
    type: 'scatter',
    mode: 'text',
    ...labels,
    textposition: 'top center',
    textfont: { size: 10, color: theme.muted },
    name: 'cells',
    legendgroup: 'cells',
    showlegend: false,
    meta: 'cell labels',
    hoverinfo: 'skip',
    xaxis: 'x',
    yaxis: 'y'
  };
  return [lines, tops];
}

// The named markers (record.mark): [t, label, hover], label and hover escaped by the kernel
// (markers.py). Those in the window, each with whether its label is shown: a label reads upward
// beside its line, and one closer than MARKER_LABEL_GAP of the drawn span to the last label
// shown is left to the hover, so labels never overlap however many markers there are.
const MARKER_LABEL_GAP = 1 / 60;

export function markersInView(store) {
  const n = store.t.length;
  if (!n) {
    return [];
  }
  const first = store.t[0];
  const minGap = (store.t[n - 1] - first) * MARKER_LABEL_GAP;
  let lastShown = null;
  const out = [];
  for (const [t, label, hover] of store.markers) {
    if (t < first) {
      continue; // from before the first sample, or out of the window
    }
    const shown = lastShown === null || t - lastShown >= minGap;
    if (shown) {
      lastShown = t;
    }
    out.push({ t, label, hover, shown });
  }
  return out;
}

// A solid line per marker (cells' are dotted), its hover the whole name. `marks`: markersInView's
// answer, found once per drawing for the trace, the labels and the lower plot's lines.
function markersTrace(store, marks, theme) {
  const top = store.figure.top || 1;
  const x = [];
  const y = [];
  const text = [];
  for (const m of marks) {
    const ms = localMs(m.t);
    x.push(ms, ms, null);
    y.push(0, top, null);
    text.push(m.hover, m.hover, null);
  }
  return {
    type: 'scatter',
    mode: 'lines',
    x,
    y,
    text,
    line: { width: 1, color: theme.muted },
    name: 'markers',
    legendgroup: 'markers',
    legendrank: 101,
    meta: 'markers',
    hovertemplate: '%{text}<extra>marker</extra>',
    xaxis: 'x',
    yaxis: 'y'
  };
}

// Each shown label, turned to read upward just right of its line, from the top of the plot.
function markerAnnotations(store, marks, theme) {
  const top = store.figure.top || 1;
  return marks
    .filter(m => m.shown)
    .map(m => ({
      text: m.label,
      hovertext: m.hover,
      x: localMs(m.t),
      y: top,
      xref: 'x',
      yref: 'y',
      textangle: -90,
      xanchor: 'left',
      yanchor: 'top',
      showarrow: false,
      bgcolor: theme.paper,
      opacity: 0.85,
      font: { size: 10, color: theme.text }
    }));
}

// The same lines through the lower plot, where there is one: the CUDA pool's steps and the
// fragmentation beside what the script did. Shapes span the axis' whole height, which has no
// figure like `top` to reach to; the upper lines give the hover.
function markerShapes(store, marks, theme) {
  if (!store.figure.lower) {
    return [];
  }
  return marks.map(m => ({
    type: 'line',
    x0: localMs(m.t),
    x1: localMs(m.t),
    xref: 'x',
    y0: 0,
    y1: 1,
    yref: 'y2 domain',
    layer: 'below',
    line: { width: 1, color: theme.muted }
  }));
}

function layoutFor(store, theme, marks) {
  const fig = store.figure;
  const lower = fig.lower;
  const spanS = store.t.length ? store.t[store.t.length - 1] - store.t[0] : 0;
  const axis = { gridcolor: theme.grid, zerolinecolor: theme.grid, linecolor: theme.grid };
  const annotations = fig.labels.length
    ? [
        {
          text: fig.labels.join(' · ').toUpperCase(),
          xref: 'paper',
          yref: 'paper',
          x: 0,
          y: 1,
          xanchor: 'left',
          yanchor: 'bottom',
          showarrow: false,
          font: { size: 12, color: '#b35806' }
        }
      ]
    : [];
  return {
    height: lower ? 560 : 440,
    margin: { l: 60, r: 60, t: 24, b: 10 },
    paper_bgcolor: theme.paper,
    plot_bgcolor: theme.paper,
    font: { color: theme.text },
    hovermode: 'x',
    xaxis: {
      ...axis,
      type: 'date',
      tickformat: '%H:%M:%S',
      hoverformat: '%H:%M:%S',
      // Ticks no closer than a second: clock times to the second would repeat.
      nticks: Math.min(8, Math.max(2, Math.floor(spanS) + 1)),
      anchor: lower ? 'y2' : 'y'
    },
    yaxis: { ...axis, title: { text: fig.unit }, domain: lower ? [0.42, 1] : [0, 1], rangemode: 'tozero' },
    yaxis2: { ...axis, title: { text: fig.unit }, domain: [0, 0.3], rangemode: 'tozero', visible: lower },
    yaxis3: {
      ...axis,
      title: { text: 'fragmentation %' },
      overlaying: 'y2',
      side: 'right',
      range: [0, 100],
      dtick: 25,
      visible: lower,
      showgrid: false
    },
    // Below the plot: a notebook column is narrow, and the plot keeps its full width. Shown even
    // for one band (the CPU view's before any cell marker), which plotly would leave unnamed, its
    // clock times cut off by the bottom margin.
    showlegend: true,
    legend: { orientation: 'h', x: 0, y: -0.08, yanchor: 'top', font: { size: 11 } },
    annotations: annotations.concat(markerAnnotations(store, marks, theme)),
    shapes: markerShapes(store, marks, theme),
    uirevision: 'keep', // zoom and legend clicks survive updates
    datarevision: store.rev
  };
}

function initialize({ model }) {
  const id = model.get('uid');
  const store = storeFrom(model.get('figure'));
  store.views = new Set();
  STORES.set(id, store);
  const redraw = () => {
    store.rev += 1;
    store.views.forEach(draw => draw());
  };
  const onFigure = () => {
    Object.assign(store, storeFrom(model.get('figure')), { views: store.views, rev: store.rev });
    redraw();
  };
  const onMessage = msg => {
    if (msg.kind === 'append') {
      append(store, msg);
      store.figure.top = msg.top ?? store.figure.top;
    } else if (msg.kind === 'cells') {
      store.cells = msg.cells;
    } else if (msg.kind === 'markers') {
      store.markers = msg.markers;
    }
    redraw();
  };
  model.on('change:figure', onFigure);
  model.on('msg:custom', onMessage);
  return () => {
    model.off('change:figure', onFigure);
    model.off('msg:custom', onMessage);
    STORES.delete(id);
  };
}

// Installed once per page: a GPU's title in a monitor's header (data-gpumem-tab, header.py)
// shows that GPU's tab, pressed as a person would (Lumino selects a tab on pointerdown at the
// tab's place); and a tab, which is cut short when many share a narrow row, shows its full
// title on hover (the title attribute, set on the way in).
function watchMonitorHeaders() {
  if (window.__jupyterGpumemHeaders) {
    return;
  }
  window.__jupyterGpumemHeaders = true;
  document.addEventListener('click', event => {
    const link = event.target.closest?.('[data-gpumem-tab]');
    const root = link?.closest('.jupyter-gpumem-monitor');
    const tabs = root?.querySelectorAll('.jupyter-gpumem-tabs .lm-TabBar-tab');
    const tab = tabs?.[Number(link.dataset.gpumemTab)];
    if (!tab) {
      return;
    }
    const box = tab.getBoundingClientRect();
    const at = { bubbles: true, cancelable: true, button: 0, clientX: box.left + box.width / 2, clientY: box.top + box.height / 2 };
    tab.dispatchEvent(new PointerEvent('pointerdown', at));
    tab.dispatchEvent(new PointerEvent('pointerup', at));
    tab.scrollIntoView({ block: 'nearest' });
  });
  document.addEventListener('mouseover', event => {
    const tab = event.target.closest?.('.jupyter-gpumem-tabs .lm-TabBar-tab');
    const label = tab?.querySelector('.lm-TabBar-tabLabel')?.textContent;
    if (label && tab.title !== label) {
      tab.title = label;
    }
  });
}

async function render({ model, el }) {
  watchMonitorHeaders();
  const store = STORES.get(model.get('uid'));
  const Plotly = await plotlyFrom(model);
  const plot = document.createElement('div');
  plot.className = 'jupyter-gpumem-plot';
  el.appendChild(plot);
  let pending = false;
  const draw = () => {
    if (pending) {
      return;
    }
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const theme = themeColors();
      const data = store.figure.series.map(s => traceFor(s, store, theme));
      const marks = markersInView(store);
      // The plot's drawing area (layoutFor's margins are 60 px each side); 600 px while hidden.
      const widthPx = plot.offsetWidth > 120 ? plot.offsetWidth - 120 : 600;
      data.push(...cellsTraces(store, theme, widthPx), markersTrace(store, marks, theme));
      Plotly.react(plot, data, layoutFor(store, theme, marks), { responsive: true, displaylogo: false });
    });
  };
  store.views.add(draw);
  draw();
  // JupyterLab's theme is switched on <body data-jp-theme-light>: redraw in its colours.
  const themeWatch = new MutationObserver(draw);
  themeWatch.observe(document.body, { attributes: true, attributeFilter: ['data-jp-theme-light', 'data-jp-theme-name'] });
  // A plot drawn in a hidden tab has no width: resize it when it is shown, and place the cell
  // labels again for its width.
  const sizeWatch = new ResizeObserver(() => {
    if (plot.offsetWidth > 0 && plot._fullLayout) {
      Plotly.Plots.resize(plot);
      draw();
    }
  });
  sizeWatch.observe(el);
  return () => {
    store.views.delete(draw);
    themeWatch.disconnect();
    sizeWatch.disconnect();
    Plotly.purge(plot);
  };
}

export default { initialize, render };
