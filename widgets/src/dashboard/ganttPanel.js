// The Gantt panel: the canvas (drawn by gantt.js), its legend, the hover tip with a box's details, wheel
// zoom and drag pan on the time axis, and the timing of full redraws that Python can ask for
// (measure_draw: the figures go to the frontend_stats trait and the root's data-draw-ms-median).

import { html, median, sizeCanvas } from "./dom.js";
import { LEFT, formatTime, plotWidth } from "./axes.js";
import { PHASE_NAMES, drawArrows, drawGantt, hitTest, stalenessOf } from "./gantt.js";
import { keyText } from "./text.js";

export function createGanttPanel(dash) {
  const { view, on } = dash;
  const canvas = html`<canvas class="amp-gantt"></canvas>`;
  const tip = html`<div class="amp-tip" hidden></div>`;
  const wrap = html`<div class="amp-gantt-wrap"></div>`;
  wrap.append(canvas, tip);
  const legend = html`<div class="amp-legend">
      <span><i style="background:#f39c34"></i>forward</span><span><i style="background:#3a7bd5"></i>backward</span>
      <span><i style="background:#f2d21b"></i>update</span>
      <span class="amp-hint">wheel: zoom · drag: pan · hover: details</span></div>`;
  let dragging = null;
  let measured = false;

  // the Gantt alone, timed (the raster included)
  function drawOnly() {
    const w = dash.width();
    const h = dash.model.get("height") || dash.layout.height;
    const ctx = sizeCanvas(canvas, w, h);
    const t = performance.now();
    const res = drawGantt(ctx, w, h, dash.runs, dash.layout, view.current());
    ctx.getImageData(0, 0, 1, 1); // wait for the raster, so the time measured includes it
    return { ms: performance.now() - t, ...res };
  }

  function draw() {
    const res = drawOnly();
    if (dash.controls.arrowsOn()) {
      dash.controls.showArrows(drawArrows(canvas.getContext("2d"), dash.width(), dash.runs, dash.layout, view.current()));
    }
    const root = dash.root;
    root.dataset.drawn = String(res.drawn);
    root.dataset.rects = String(res.rects);
    root.dataset.drawMs = res.ms.toFixed(2);
    root.dataset.labels = JSON.stringify(res.labels);
    maybeMeasure();
  }

  function maybeMeasure() {
    const n = dash.model.get("measure_draw");
    if (measured || n <= 0) return;
    if (!dash.live && !dash.allLoaded()) return;
    if (dash.runs.every((r) => r.events.length === 0)) return;
    measured = true;
    const times = [];
    let res = null;
    for (let k = 0; k < n; k++) {
      res = drawOnly();
      times.push(res.ms);
    }
    const stats = { draw_ms_median: median(times), draw_ms: times, boxes_drawn: res.drawn, rects: res.rects, width: dash.width() };
    dash.root.dataset.drawMsMedian = stats.draw_ms_median.toFixed(2);
    dash.root.dataset.measuredBoxes = String(res.drawn);
    dash.model.set("frontend_stats", stats);
    dash.model.save_changes();
  }

  // zoom (wheel) and pan (drag) on the time axis; either stops following live
  on(
    canvas,
    "wheel",
    (e) => {
      e.preventDefault();
      const v = view.current();
      const x = e.clientX - canvas.getBoundingClientRect().left;
      const frac = Math.min(1, Math.max(0, (x - LEFT) / plotWidth(dash.width())));
      const at = v.t0 + frac * (v.t1 - v.t0);
      const span = Math.max(1e-7, (v.t1 - v.t0) * Math.pow(1.0015, e.deltaY));
      view.show(at - frac * span, at - frac * span + span);
      dash.controls.stopFollowing();
      dash.schedule();
    },
    { passive: false },
  );
  on(canvas, "mousedown", (e) => {
    const v = view.current();
    dragging = { x: e.clientX, t0: v.t0, t1: v.t1 };
  });
  on(window, "mouseup", () => {
    dragging = null;
  });
  on(canvas, "mousemove", (e) => {
    const rect = canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top;
    if (dragging) {
      const dt = ((e.clientX - dragging.x) / plotWidth(dash.width())) * (dragging.t1 - dragging.t0);
      view.show(dragging.t0 - dt, dragging.t1 - dt);
      dash.controls.stopFollowing();
      tip.hidden = true;
      dash.schedule();
      return;
    }
    showTip(x, y);
  });
  on(canvas, "mouseleave", () => {
    tip.hidden = true;
  });

  // the details of the box under (x, y): node, phase, key, worker, times, queue depth, staleness
  function showTip(x, y) {
    const runs = dash.runs;
    const hit = hitTest(x, y, dash.width(), runs, dash.layout, view.current());
    if (!hit) {
      tip.hidden = true;
      return;
    }
    const r = runs[hit.run];
    const c = r.events.cols;
    const i = hit.row;
    const phase = PHASE_NAMES[c.phase[i]] || "?";
    const n = c.messages[i];
    const keys = r.bundleKeys(i);
    const who = n > 1 ? `bundle of ${n} messages, keys ${keys ? listKeys(keys) : `${c.key[i]}, …`}` : keyText(c.key[i]);
    const lines = [
      `${r.info.node_names[c.node[i]] ?? `node ${c.node[i]}`} · ${phase}`,
      `${who} · worker ${c.worker[i]}${runs.length > 1 ? ` · ${r.info.label}` : ""}`,
      `${formatTime(c.start[i])} + ${formatTime(c.end[i] - c.start[i])} · queue ${c.depth[i]}`,
    ];
    if (phase === "bwd") {
      const st = stalenessOf(r, i);
      if (st.length) lines.push(`gradient staleness ${st.join(", ")}`);
    }
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    tip.style.left = `${Math.min(x + 12, dash.width() - 220)}px`;
    tip.style.top = `${y + 12}px`;
  }

  return {
    els: [wrap, legend],
    draw,
    // draw times are measured again (measure_draw changed)
    remeasure() {
      measured = false;
    },
  };
}

// a bundle's keys for the tooltip: all of them when few, else the first ones and how many more
function listKeys(keys, most = 24) {
  return keys.length <= most ? keys.join(", ") : `${keys.slice(0, most).join(", ")}, … (${keys.length - most} more)`;
}
