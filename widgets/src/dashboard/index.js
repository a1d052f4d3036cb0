// amp_notebook's dashboard (anywidget front end). Python sends frames of binary columns (see
// amp_notebook/ui/feed.py); this view keeps them in bounded rings and draws a canvas Gantt chart plus small
// charts, and sends the user's requests (pause, resume, stop, slider moves, checkpoint, export) back as messages.
// Test hooks: the root element's data-* attributes (boxes received per worker, state echoed by the run, etc.).
//
// Where things are:
//   index.js        this file: the entry; puts the panels together, routes Python's messages, redraws
//   controls.js     the toolbar (run controls, replay's play and time slider, follow, arrows, fit, export)
//   status.js       the stats line, errors, a stuck run's diagnosis and notes above the Gantt
//   diagnosis.js    the watchdog's diagnosis and the NaN/inf skip count as text
//   ganttPanel.js   the Gantt canvas with hover, zoom and pan (drawing: gantt.js)
//   chartsPanel.js  queue depth, keys in flight, loss and accuracy, staleness (drawing: charts.js, axes.js)
//   timeview.js     the time window all time axes share
//   store.js        the bounded rings that hold the rows of each run
//
// The panels share one context, `dash`: the model, the runs and their lane layout, the time view, and
// schedule() (redraw at the next frame), send(msg) and on(target, type, fn) (listeners removed on close).

import "./style.css";
import { RunStore } from "./store.js";
import { layoutLanes } from "./gantt.js";
import { html } from "./dom.js";
import { createTimeView } from "./timeview.js";
import { createControls } from "./controls.js";
import { createStatus } from "./status.js";
import { createGanttPanel } from "./ganttPanel.js";
import { createChartsPanel } from "./chartsPanel.js";

const MAX_SAMPLES = 20000;

function render({ model, el }) {
  const mode = model.get("mode");
  const capacity = model.get("max_boxes");
  const listeners = [];
  const root = html`<div class="amp-dashboard" data-mode="${mode}" data-boxes="0" data-frames="0"></div>`;
  const dash = {
    model,
    mode,
    live: mode === "live",
    root,
    runs: model.get("runs").map((info) => new RunStore(info, capacity)),
    loaded: new Set(), // runs of a replay whose rows have all arrived
    schedule: () => schedule(),
    send: (msg) => model.send(msg),
    on(target, type, fn, opts) {
      target.addEventListener(type, fn, opts);
      listeners.push(() => target.removeEventListener(type, fn, opts));
    },
    width: () => Math.max(320, root.clientWidth || 900),
    allLoaded: () => dash.loaded.size >= dash.runs.length,
  };
  dash.layout = layoutLanes(dash.runs);
  dash.view = createTimeView(dash);
  dash.status = createStatus(dash);
  dash.controls = createControls(dash);
  const gantt = createGanttPanel(dash);
  const charts = createChartsPanel(dash);
  root.append(dash.controls.el, ...dash.status.els, ...gantt.els, ...charts.els);
  el.appendChild(root);

  let dirty = true;
  let raf = 0;
  let frames = 0;

  function draw() {
    raf = 0;
    if (!dirty) return;
    dirty = false;
    gantt.draw();
    charts.draw(dash.view.current());
    dash.status.update(frames);
  }

  function schedule() {
    dirty = true;
    if (!raf) raf = requestAnimationFrame(draw);
  }

  // ---------------------------------------------------------------- messages from Python
  function onMessage(content, buffers) {
    const runs = dash.runs;
    switch (content.type) {
      case "reset":
        for (const r of runs) r.reset();
        dash.loaded = new Set();
      // falls through: a reset frame may carry rows
      case "rows": {
        const r = runs[content.run || 0];
        if (content.columns) r.ingest(content, buffers);
        if (content.meta) {
          r.addMeta(content.meta, MAX_SAMPLES);
          if (dash.live) dash.controls.applyStatus(content.meta.status);
        }
        frames++;
        break;
      }
      case "meta": {
        runs[content.run || 0].addMeta(content.meta, MAX_SAMPLES);
        dash.loaded.add(content.run || 0);
        if (dash.allLoaded()) dash.controls.fitAll();
        break;
      }
      case "error":
        dash.status.showError(content.message);
        break;
      case "checkpointed":
        dash.status.showNote(`checkpoint saved to ${content.path} (${(content.bytes / 1e6).toPrecision(2)} MB)`);
        root.dataset.checkpoint = content.path;
        break;
      case "exported":
        dash.status.showNote(`trace written to ${content.path} (${(content.bytes / 1e6).toFixed(1)} MB)`);
        root.dataset.exported = content.path;
        if (content.download && buffers.length) download(content.path, buffers[0]);
        break;
      default:
        break;
    }
    schedule();
  }

  const resize = new ResizeObserver(() => schedule());
  resize.observe(root);
  const onCustom = (content, buffers) => onMessage(content, buffers || []);
  model.on("msg:custom", onCustom);
  const onRuns = () => {
    dash.runs = model.get("runs").map((info) => new RunStore(info, capacity));
    dash.layout = layoutLanes(dash.runs);
    schedule();
  };
  model.on("change:runs", onRuns);
  const onMeasure = () => {
    gantt.remeasure();
    schedule();
  };
  model.on("change:measure_draw", onMeasure);
  const onWindow = () => {
    dash.view.state.span = model.get("window_s");
    schedule();
  };
  model.on("change:window_s", onWindow);

  root.dataset.ready = "1";
  dash.send({ type: "ready" });
  schedule();

  return () => {
    model.off("msg:custom", onCustom);
    model.off("change:runs", onRuns);
    model.off("change:measure_draw", onMeasure);
    model.off("change:window_s", onWindow);
    for (const off of listeners) off();
    resize.disconnect();
    if (raf) cancelAnimationFrame(raf);
    dash.controls.dispose();
  };
}

// the exported trace, downloaded by the browser as the file Python wrote
function download(path, buffer) {
  const blob = new Blob([buffer], { type: "application/json" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = path.split(/[\\/]/).pop();
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

export default { render };
