// amp_notebook's dashboard (anywidget front end). Python sends frames of binary columns (see
// amp_notebook/ui/feed.py); this view keeps them in bounded rings and draws a canvas Gantt chart plus small
// charts, and sends the user's requests (pause, resume, stop, slider moves, export) back as messages.
// Test hooks: the root element's data-* attributes (boxes received per worker, state echoed by the run, etc.).

import "./style.css";
import { RunStore } from "./store.js";
import { drawGantt, drawArrows, layoutLanes, hitTest, stalenessOf, PHASE_NAMES, formatTime } from "./gantt.js";
import { drawTimeLines, depthSeries, drawHistograms, LANE_COLORS } from "./charts.js";

const MAX_SAMPLES = 20000;
const CHART_H = 90;
const PLAY_SECONDS = 12; // a replay played from start to end takes this long

function html(strings, ...values) {
  const t = document.createElement("template");
  t.innerHTML = strings.reduce((acc, s, i) => acc + s + (i < values.length ? values[i] : ""), "");
  return t.content.firstElementChild;
}

function sizeCanvas(canvas, w, h) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : 0;
}

function fmt(v, digits = 3) {
  return v === null || v === undefined ? "–" : (+v).toPrecision(digits);
}

function render({ model, el }) {
  const mode = model.get("mode");
  const live = mode === "live";
  const capacity = model.get("max_boxes");
  let runs = model.get("runs").map((info) => new RunStore(info, capacity));
  const controls = model.get("controls") || {};

  const root = html`<div class="amp-dashboard" data-mode="${mode}" data-boxes="0" data-frames="0"></div>`;
  const bar = html`<div class="amp-toolbar"></div>`;
  const liveControls = live
    ? html`<span class="amp-group">
        <span class="amp-state" title="run state">…</span>
        <button class="amp-pause" title="take no new forward work; backward work drains">Pause</button>
        <button class="amp-resume">Resume</button>
        <button class="amp-stop" title="admit no more keys; the run ends when the keys in flight complete">Stop</button>
        <label title="keys in flight at most">max_active_keys
          <input class="amp-mak" type="range" min="${controls.max_active_keys?.min ?? 1}"
                 max="${controls.max_active_keys?.max ?? 64}" step="1" value="1"><span class="amp-mak-value">–</span></label>
        <label title="gradients each parameterized node holds before it updates (amp mode)">min_update_frequency
          <input class="amp-muf" type="range" min="1" max="${controls.min_update_frequency?.max ?? 1000}" step="1"
                 value="1"><span class="amp-muf-value">–</span></label>
      </span>`
    : html`<span class="amp-group">
        <button class="amp-play">Play</button>
        <label>time <input class="amp-time" type="range" min="0" max="1" step="any" value="1">
          <span class="amp-time-value">–</span></label>
      </span>`;
  const viewControls = html`<span class="amp-group">
      <label title="keep the newest time in view"><input class="amp-follow" type="checkbox" ${live ? "checked" : ""}> follow</label>
      <label title="arrows for messages between workers (when few boxes are in view)"><input class="amp-arrows" type="checkbox"> arrows</label>
      <button class="amp-fit" title="show everything held">Fit</button>
      <button class="amp-export" title="Chrome/Perfetto JSON: written next to the notebook and downloaded">Export trace</button>
    </span>`;
  bar.append(liveControls, viewControls);
  const stats = html`<div class="amp-stats"></div>`;
  const error = html`<div class="amp-error" hidden></div>`;
  const note = html`<div class="amp-note" hidden></div>`;
  const ganttWrap = html`<div class="amp-gantt-wrap"></div>`;
  const gantt = html`<canvas class="amp-gantt"></canvas>`;
  const tip = html`<div class="amp-tip" hidden></div>`;
  ganttWrap.append(gantt, tip);
  const legend = html`<div class="amp-legend">
      <span><i style="background:#f39c34"></i>forward</span><span><i style="background:#3a7bd5"></i>backward</span>
      <span><i style="background:#f2d21b"></i>update</span>
      <span class="amp-hint">wheel: zoom · drag: pan · hover: details</span></div>`;
  const queue = html`<canvas class="amp-chart amp-queue"></canvas>`;
  const keys = html`<canvas class="amp-chart amp-keys"></canvas>`;
  const loss = html`<canvas class="amp-chart amp-loss"></canvas>`;
  const hist = html`<canvas class="amp-chart amp-hist"></canvas>`;
  root.append(bar, stats, error, note, ganttWrap, legend, queue, keys, loss, hist);
  el.appendChild(root);

  const $ = (sel) => root.querySelector(sel);
  const view = { follow: live, span: model.get("window_s"), t0: 0, t1: model.get("window_s"), cut: undefined };
  let layout = layoutLanes(runs);
  let dirty = true;
  let raf = 0;
  let frames = 0;
  let measured = false;
  let loadedRuns = new Set();
  let play = null;
  let dragging = null;
  let sliderBusy = { mak: false, muf: false };

  const width = () => Math.max(320, root.clientWidth || 900);
  const latest = () => Math.max(0, ...runs.map((r) => r.tMax));
  const earliest = () => {
    let lo = Infinity;
    for (const r of runs) {
      const { start } = r.events.cols;
      r.events.forEach((i) => {
        if (start[i] < lo) lo = start[i];
      });
    }
    return Number.isFinite(lo) ? lo : 0;
  };

  function currentView() {
    if (view.follow) {
      const end = !live && view.cut !== undefined ? view.cut : latest();
      // a young run is shown whole, with room to grow, until it is older than the span followed
      const span = Math.min(view.span, Math.max(end * 1.25, 0.02));
      view.t1 = Math.max(end, span);
      view.t0 = view.t1 - span;
    }
    return { t0: view.t0, t1: view.t1, cut: live ? undefined : view.cut };
  }

  function drawGanttOnly() {
    const w = width();
    const h = model.get("height") || layout.height;
    const ctx = sizeCanvas(gantt, w, h);
    const v = currentView();
    const t = performance.now();
    const res = drawGantt(ctx, w, h, runs, layout, v);
    ctx.getImageData(0, 0, 1, 1); // wait for the raster, so the time measured includes it
    return { ms: performance.now() - t, ...res };
  }

  function draw() {
    raf = 0;
    if (!dirty) return;
    dirty = false;
    const res = drawGanttOnly();
    const w = width();
    const v = currentView();
    if ($(".amp-arrows").checked) {
      const arrows = drawArrows(gantt.getContext("2d"), w, runs, layout, v);
      root.dataset.arrows = String(arrows);
      $(".amp-arrows").parentElement.title = arrows < 0 ? "zoom in to see message arrows" : `${arrows} arrows`;
    }
    // queue depth per worker (all runs), keys in flight, loss/accuracy, staleness histograms
    let offset = 0;
    const depth = [];
    runs.forEach((r, ri) => {
      for (const s of depthSeries(r, offset, v.t0, v.t1, w)) {
        if (runs.length > 1) s.label = `${r.info.label} ${s.label}`;
        depth.push(s);
      }
      offset += r.info.workers;
    });
    drawTimeLines(sizeCanvas(queue, w, CHART_H), w, CHART_H, "queue depth per worker", depth, v.t0, v.t1, { steps: true });
    const keySeries = runs.map((r, ri) => ({
      label: runs.length > 1 ? r.info.label : "keys in flight",
      color: LANE_COLORS[ri * 3 % LANE_COLORS.length],
      points: live ? r.samples.map((s) => [s.t, s.keys_in_flight]) : r.meta?.keys_in_flight || [],
    }));
    drawTimeLines(sizeCanvas(keys, w, CHART_H), w, CHART_H, "keys in flight", keySeries, v.t0, v.t1, { steps: true });
    const lossSeries = [];
    runs.forEach((r, ri) => {
      const tag = runs.length > 1 ? `${r.info.label} ` : "";
      if (live) {
        lossSeries.push({ label: `${tag}train loss (moving avg)`, color: "#c0392b", points: r.samples.map((s) => [s.t, s.loss]) });
        lossSeries.push({ label: `${tag}train accuracy`, color: "#27ae60", points: r.samples.map((s) => [s.t, s.accuracy]) });
      }
      const ep = r.epochs;
      lossSeries.push({ label: `${tag}epoch train loss`, color: ri ? "#8e44ad" : "#e67e22", points: ep.map((e) => [e.end_s, e.train_loss]) });
      lossSeries.push({
        label: `${tag}val accuracy`,
        color: ri ? "#16a085" : "#2980b9",
        points: ep.filter((e) => e.val_accuracy !== null && e.val_accuracy !== undefined).map((e) => [e.end_s, e.val_accuracy]),
      });
    });
    const allT = live ? v : { t0: 0, t1: Math.max(1e-9, latest()) };
    drawTimeLines(sizeCanvas(loss, w, CHART_H), w, CHART_H, "loss and accuracy", lossSeries, allT.t0, allT.t1);
    const histAll = {};
    runs.forEach((r) => {
      for (const [name, pairs] of Object.entries(r.meta?.staleness_hist || {})) {
        histAll[runs.length > 1 ? `${r.info.label}: ${name}` : name] = pairs;
      }
    });
    drawHistograms(sizeCanvas(hist, w, CHART_H + 20), w, CHART_H + 20, "gradient staleness per parameterized node (whole run)", histAll);

    root.dataset.drawn = String(res.drawn);
    root.dataset.rects = String(res.rects);
    root.dataset.drawMs = res.ms.toFixed(2);
    updateStats();
    maybeMeasure();
  }

  function schedule() {
    dirty = true;
    if (!raf) raf = requestAnimationFrame(draw);
  }

  function updateStats() {
    const parts = [];
    runs.forEach((r) => {
      const m = r.meta || {};
      const util = (m.utilization || []).map((u) => `${Math.round(u * 100)}%`).join(" ");
      if (live) {
        const s = m.status || {};
        const last = r.samples[r.samples.length - 1] || {};
        parts.push(
          `epoch ${s.epoch ?? "–"}/${s.epochs ?? "–"} · keys done ${s.keys_done ?? 0} · in flight ${s.keys_in_flight ?? 0}` +
            ` · ${fmt(last.throughput, 4)} instances/s · loss ${fmt(s.recent_loss)} · accuracy ${fmt(s.recent_accuracy)}` +
            ` · utilization ${util || "–"} · ${formatTime(s.elapsed_s || 0)}`,
        );
      } else {
        const ep = r.epochs;
        const acc = ep.length ? ep[ep.length - 1].val_accuracy : null;
        parts.push(
          `${r.info.label}: ${formatTime(m.duration_s || 0)} · ${m.rows ?? r.events.total} boxes · utilization ${util || "–"}` +
            (acc !== null && acc !== undefined ? ` · final val accuracy ${fmt(acc)}` : ""),
        );
      }
    });
    stats.textContent = parts.join("\n");
    let total = 0;
    const perWorker = [];
    for (const r of runs) {
      total += r.received.reduce((a, b) => a + b, 0);
      perWorker.push(...r.received);
    }
    root.dataset.boxes = String(total);
    root.dataset.boxesPerWorker = JSON.stringify(perWorker);
    root.dataset.held = String(runs.reduce((a, r) => a + r.events.length, 0));
    root.dataset.frames = String(frames);
  }

  function applyStatus(status) {
    if (!status) return;
    root.dataset.state = status.state;
    $(".amp-state").textContent = status.state;
    $(".amp-state").className = `amp-state amp-state-${status.state}`;
    const mak = status.max_active_keys;
    root.dataset.runMaxActiveKeys = String(mak);
    $(".amp-mak-value").textContent = String(mak);
    if (!sliderBusy.mak) $(".amp-mak").value = String(mak);
    const mufs = Object.values(status.min_update_frequency || {});
    const same = mufs.length && mufs.every((m) => m === mufs[0]);
    const mufText = mufs.length === 0 ? "–" : same ? String(mufs[0]) : `${Math.min(...mufs)}–${Math.max(...mufs)}`;
    root.dataset.runMinUpdateFrequency = mufText;
    $(".amp-muf-value").textContent = mufText;
    if (!sliderBusy.muf && mufs.length) $(".amp-muf").value = String(Math.min(...mufs));
    const ended = status.state === "finished" || status.state === "failed" || status.state === "stopping";
    for (const sel of [".amp-pause", ".amp-resume", ".amp-stop", ".amp-mak", ".amp-muf"]) $(sel).disabled = ended;
    $(".amp-mak").disabled ||= controls.mode === "sync";
    $(".amp-muf").disabled ||= controls.mode !== "amp";
    if (status.error) showError(status.error);
  }

  function showError(message) {
    error.hidden = false;
    error.textContent = message;
    root.dataset.error = message;
  }

  function maybeMeasure() {
    const n = model.get("measure_draw");
    if (measured || n <= 0) return;
    if (!live && loadedRuns.size < runs.length) return;
    if (runs.every((r) => r.events.length === 0)) return;
    measured = true;
    const times = [];
    let res = null;
    for (let k = 0; k < n; k++) {
      res = drawGanttOnly();
      times.push(res.ms);
    }
    const stats = { draw_ms_median: median(times), draw_ms: times, boxes_drawn: res.drawn, rects: res.rects, width: width() };
    root.dataset.drawMsMedian = stats.draw_ms_median.toFixed(2);
    root.dataset.measuredBoxes = String(res.drawn);
    model.set("frontend_stats", stats);
    model.save_changes();
  }

  // ---------------------------------------------------------------- messages from Python
  function onMessage(content, buffers) {
    switch (content.type) {
      case "reset":
        for (const r of runs) r.reset();
        loadedRuns = new Set();
      // falls through: a reset frame may carry rows
      case "rows": {
        const r = runs[content.run || 0];
        if (content.columns) r.ingest(content, buffers);
        if (content.meta) {
          r.addMeta(content.meta, MAX_SAMPLES);
          if (live) applyStatus(content.meta.status);
        }
        frames++;
        break;
      }
      case "meta": {
        runs[content.run || 0].addMeta(content.meta, MAX_SAMPLES);
        loadedRuns.add(content.run || 0);
        if (loadedRuns.size === runs.length) fitAll();
        break;
      }
      case "error":
        showError(content.message);
        break;
      case "exported":
        note.hidden = false;
        note.textContent = `trace written to ${content.path} (${(content.bytes / 1e6).toFixed(1)} MB)`;
        root.dataset.exported = content.path;
        if (content.download && buffers.length) {
          const blob = new Blob([buffers[0]], { type: "application/json" });
          const a = document.createElement("a");
          a.href = URL.createObjectURL(blob);
          a.download = content.path.split(/[\\/]/).pop();
          a.click();
          setTimeout(() => URL.revokeObjectURL(a.href), 10000);
        }
        break;
      default:
        break;
    }
    schedule();
  }

  function fitAll() {
    const lo = earliest();
    const hi = Math.max(latest(), lo + 1e-6);
    view.follow = false;
    $(".amp-follow").checked = false;
    view.t0 = lo;
    view.t1 = hi;
    if (!live) {
      const slider = $(".amp-time");
      slider.min = "0";
      slider.max = String(hi);
      slider.value = String(hi);
      view.cut = hi;
      $(".amp-time-value").textContent = formatTime(hi);
    }
  }

  // ---------------------------------------------------------------- user input
  const send = (msg) => model.send(msg);
  const listeners = [];
  const on = (target, type, fn, opts) => {
    target.addEventListener(type, fn, opts);
    listeners.push(() => target.removeEventListener(type, fn, opts));
  };

  if (live) {
    on($(".amp-pause"), "click", () => send({ type: "control", action: "pause" }));
    on($(".amp-resume"), "click", () => send({ type: "control", action: "resume" }));
    on($(".amp-stop"), "click", () => send({ type: "control", action: "stop" }));
    for (const [cls, action, key] of [
      [".amp-mak", "max_active_keys", "mak"],
      [".amp-muf", "min_update_frequency", "muf"],
    ]) {
      const input = $(cls);
      on(input, "input", () => {
        sliderBusy[key] = true;
        $(`${cls}-value`).textContent = `${input.value}…`;
      });
      on(input, "change", () => {
        sliderBusy[key] = false;
        send({ type: "control", action, value: Number(input.value) });
      });
    }
  } else {
    const slider = $(".amp-time");
    on(slider, "input", () => {
      view.cut = Number(slider.value);
      $(".amp-time-value").textContent = formatTime(view.cut);
      schedule();
    });
    on($(".amp-play"), "click", () => {
      if (play) {
        cancelAnimationFrame(play.id);
        play = null;
        $(".amp-play").textContent = "Play";
        return;
      }
      const end = latest();
      const began = performance.now();
      const from = view.cut >= end ? 0 : view.cut || 0;
      view.follow = true;
      view.span = Math.max(end / 8, 1e-6);
      $(".amp-follow").checked = true;
      $(".amp-play").textContent = "Pause";
      const step = () => {
        const t = from + ((performance.now() - began) / 1000 / PLAY_SECONDS) * end;
        view.cut = Math.min(end, t);
        slider.value = String(view.cut);
        $(".amp-time-value").textContent = formatTime(view.cut);
        schedule();
        if (t < end) play = { id: requestAnimationFrame(step) };
        else {
          play = null;
          $(".amp-play").textContent = "Play";
        }
      };
      play = { id: requestAnimationFrame(step) };
    });
  }
  on($(".amp-follow"), "change", () => {
    view.follow = $(".amp-follow").checked;
    view.span = Math.max(1e-6, view.t1 - view.t0);
    schedule();
  });
  on($(".amp-arrows"), "change", () => schedule());
  on($(".amp-fit"), "click", () => {
    fitAll();
    schedule();
  });
  on($(".amp-export"), "click", () => send({ type: "export", download: true }));

  // zoom (wheel) and pan (drag) on the time axis; either stops following live
  on(
    gantt,
    "wheel",
    (e) => {
      e.preventDefault();
      const v = currentView();
      const rect = gantt.getBoundingClientRect();
      const x = e.clientX - rect.left;
      const plotW = width() - 74;
      const frac = Math.min(1, Math.max(0, (x - 74) / plotW));
      const at = v.t0 + frac * (v.t1 - v.t0);
      const factor = Math.pow(1.0015, e.deltaY);
      const span = Math.max(1e-7, (v.t1 - v.t0) * factor);
      view.follow = false;
      $(".amp-follow").checked = false;
      view.t0 = at - frac * span;
      view.t1 = view.t0 + span;
      view.span = span;
      schedule();
    },
    { passive: false },
  );
  on(gantt, "mousedown", (e) => {
    const v = currentView();
    dragging = { x: e.clientX, t0: v.t0, t1: v.t1 };
  });
  on(window, "mouseup", () => {
    dragging = null;
  });
  on(gantt, "mousemove", (e) => {
    const rect = gantt.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top;
    if (dragging) {
      const dt = ((e.clientX - dragging.x) / (width() - 74)) * (dragging.t1 - dragging.t0);
      view.follow = false;
      $(".amp-follow").checked = false;
      view.t0 = dragging.t0 - dt;
      view.t1 = dragging.t1 - dt;
      tip.hidden = true;
      schedule();
      return;
    }
    const hit = hitTest(x, y, width(), runs, layout, currentView());
    if (!hit) {
      tip.hidden = true;
      return;
    }
    const r = runs[hit.run];
    const c = r.events.cols;
    const i = hit.row;
    const phase = PHASE_NAMES[c.phase[i]] || "?";
    const lines = [
      `${r.info.node_names[c.node[i]] ?? `node ${c.node[i]}`} · ${phase}`,
      `key ${c.key[i]} · worker ${c.worker[i]}${runs.length > 1 ? ` · ${r.info.label}` : ""}`,
      `${formatTime(c.start[i])} + ${formatTime(c.end[i] - c.start[i])} · queue ${c.depth[i]}`,
    ];
    if (phase === "bwd") {
      const st = stalenessOf(r, i);
      if (st.length) lines.push(`gradient staleness ${st.join(", ")}`);
    }
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    tip.style.left = `${Math.min(x + 12, width() - 220)}px`;
    tip.style.top = `${y + 12}px`;
  });
  on(gantt, "mouseleave", () => {
    tip.hidden = true;
  });

  const resize = new ResizeObserver(() => schedule());
  resize.observe(root);
  const onCustom = (content, buffers) => onMessage(content, buffers || []);
  model.on("msg:custom", onCustom);
  const onRuns = () => {
    runs = model.get("runs").map((info) => new RunStore(info, capacity));
    layout = layoutLanes(runs);
    schedule();
  };
  model.on("change:runs", onRuns);
  const onMeasure = () => {
    measured = false;
    schedule();
  };
  model.on("change:measure_draw", onMeasure);
  const onWindow = () => {
    view.span = model.get("window_s");
    schedule();
  };
  model.on("change:window_s", onWindow);

  root.dataset.ready = "1";
  send({ type: "ready" });
  schedule();

  return () => {
    model.off("msg:custom", onCustom);
    model.off("change:runs", onRuns);
    model.off("change:measure_draw", onMeasure);
    model.off("change:window_s", onWindow);
    for (const off of listeners) off();
    resize.disconnect();
    if (raf) cancelAnimationFrame(raf);
    if (play) cancelAnimationFrame(play.id);
  };
}

export default { render };
