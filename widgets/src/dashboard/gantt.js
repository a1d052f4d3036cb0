// The Gantt chart: one lane per worker (per run, stacked when comparing), one box per handled message,
// coloured by phase as in the paper's Fig. 1. Drawing cost is bounded by pixels, not rows: boxes of one
// lane and phase that touch within half a pixel are merged into one rectangle, and the rectangles of each
// phase are filled as one path. The time axis (axes.js) is the one every chart under the Gantt shares.

import { LEFT, formatTime, plotWidth, timeTicks } from "./axes.js";
import { boxLabel } from "./text.js";

export const PHASE_NAMES = ["fwd", "bwd", "update"];
export const PHASE_COLORS = ["#f39c34", "#3a7bd5", "#f2d21b"]; // forward orange, backward blue, update yellow
export const LANE_H = 26;
export const LANE_GAP = 4;
export const RUN_HEADER_H = 18;
export const AXIS_H = 18;
export { LEFT, formatTime };
const MAX_LABELS = 1500;
const LABELS_REPORTED = 20; // on the root element (data-labels), for tests
const LABEL_MIN_PX = 22;
const DENSE_PX = 2; // boxes narrower than this are drawn as per-pixel phase stacks

// Lanes for the runs shown: [{run, worker, y}], and the total height.
export function layoutLanes(runs) {
  const lanes = [];
  let y = AXIS_H;
  runs.forEach((r, ri) => {
    if (runs.length > 1) y += RUN_HEADER_H;
    for (let w = 0; w < r.info.workers; w++) {
      lanes.push({ run: ri, worker: w, y });
      y += LANE_H + LANE_GAP;
    }
  });
  return { lanes, height: y + 4 };
}

// Draw the visible boxes. view: {t0, t1, cut} (cut: hide boxes starting after it, for replay).
// Returns {drawn, rects, labels}: rows in view, rectangles filled, the first labels written on boxes.
export function drawGantt(ctx, width, height, runs, layout, view) {
  const { t0, t1 } = view;
  const cut = view.cut ?? Infinity;
  const plotW = plotWidth(width);
  const scale = plotW / Math.max(1e-12, t1 - t0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px sans-serif";
  ctx.textBaseline = "middle";

  // lanes and labels
  ctx.fillStyle = "#f6f7f9";
  for (const lane of layout.lanes) ctx.fillRect(LEFT, lane.y, plotW, LANE_H);
  ctx.fillStyle = "#333";
  runs.forEach((r, ri) => {
    if (runs.length > 1) {
      const first = layout.lanes.find((l) => l.run === ri);
      ctx.font = "bold 11px sans-serif";
      ctx.fillText(r.info.label, 4, first.y - RUN_HEADER_H / 2);
      ctx.font = "11px sans-serif";
    }
  });
  for (const lane of layout.lanes) ctx.fillText(`worker ${lane.worker}`, 4, lane.y + LANE_H / 2);

  // time axis
  const ticks = timeTicks(t0, t1, plotW);
  ctx.strokeStyle = "#ddd";
  ctx.fillStyle = "#666";
  ctx.beginPath();
  for (const { t, label } of ticks) {
    const x = LEFT + (t - t0) * scale;
    ctx.moveTo(x + 0.5, AXIS_H - 4);
    ctx.lineTo(x + 0.5, height);
    if (x + 3 + ctx.measureText(label).width <= width) ctx.fillText(label, x + 3, AXIS_H / 2);
  }
  ctx.stroke();

  // Boxes at least DENSE_PX wide are drawn as they are (touching ones of a phase merged). Narrower boxes
  // add their duration to their pixel column's time per phase; each column is then drawn as a stack whose
  // heights are the fractions of that column's time spent in each phase. A dense window thus shows both
  // how busy a worker was and on what, at a cost of (lanes x phases x pixels) rectangles at most.
  const rects = [[], [], []];
  const labels = [];
  let drawn = 0;
  let rectCount = 0;
  let laneBase = 0;
  const cols = Math.ceil(plotW);
  const pxTime = 1 / scale;
  const barH = LANE_H - 4;
  for (const r of runs) {
    const ev = r.events;
    const { start, end, worker, phase, key, messages } = ev.cols;
    const nLanes = r.info.workers;
    const curX0 = new Float64Array(nLanes * 3).fill(-1);
    const curX1 = new Float64Array(nLanes * 3).fill(-2);
    const density = new Float64Array(nLanes * 3 * cols);
    const laneY = layout.lanes.slice(laneBase, laneBase + nLanes).map((l) => l.y);
    const cap = ev.capacity;
    let i = (ev.head - ev.length + cap) % cap;
    for (let k = 0; k < ev.length; k++, i = i + 1 === cap ? 0 : i + 1) {
      const s = start[i];
      if (s > cut || s > t1) continue;
      let e = end[i];
      if (e < t0) continue;
      if (e > cut) e = cut;
      const w = worker[i];
      if (w >= nLanes) continue;
      drawn++;
      const ph = phase[i] > 2 ? 2 : phase[i];
      const slot = w * 3 + ph;
      const px0 = (s - t0) * scale;
      const px1 = (e - t0) * scale;
      if (px1 - px0 < DENSE_PX) {
        const c = Math.floor((px0 + px1) / 2);
        if (c >= 0 && c < cols) density[slot * cols + c] += e - s;
        continue;
      }
      const x0 = LEFT + Math.max(0, px0);
      const x1 = LEFT + Math.min(plotW, px1);
      if (x0 <= curX1[slot] + 0.5) {
        if (x1 > curX1[slot]) curX1[slot] = x1;
      } else {
        if (curX0[slot] >= 0) {
          rects[ph].push(curX0[slot], laneY[w], curX1[slot] - curX0[slot], barH);
          rectCount++;
        }
        curX0[slot] = x0;
        curX1[slot] = x1;
      }
      if (x1 - x0 >= LABEL_MIN_PX && labels.length < MAX_LABELS * 3) {
        // a bundle shows how many messages it ran (its keys are in the tooltip)
        labels.push(x0, laneY[w], boxLabel(key[i], messages[i]));
      }
    }
    const stacked = [[], [], []];
    for (let w = 0; w < nLanes; w++) {
      for (let c = 0; c < cols; c++) {
        let below = 0;
        for (let ph = 0; ph < 3; ph++) {
          const t = density[(w * 3 + ph) * cols + c];
          if (t <= 0) continue;
          const h = Math.max(1, Math.min(1 - below, t / pxTime) * barH);
          stacked[ph].push(LEFT + c, laneY[w] + barH - below * barH - h, 1, h);
          below = Math.min(1, below + h / barH);
          rectCount++;
        }
      }
    }
    for (let ph = 0; ph < 3; ph++) rects[ph] = stacked[ph].concat(rects[ph]);
    for (let slot = 0; slot < nLanes * 3; slot++) {
      if (curX0[slot] < 0) continue;
      rects[slot % 3].push(curX0[slot], laneY[Math.floor(slot / 3)], curX1[slot] - curX0[slot], barH);
      rectCount++;
    }
    laneBase += nLanes;
  }
  for (let ph = 0; ph < 3; ph++) {
    const list = rects[ph];
    if (list.length === 0) continue;
    ctx.fillStyle = PHASE_COLORS[ph];
    ctx.beginPath();
    for (let j = 0; j < list.length; j += 4) ctx.rect(list[j], list[j + 1] + 2, list[j + 2], list[j + 3]);
    ctx.fill();
  }
  // key ids on boxes wide enough to hold them (the paper's Fig. 1 labels); a bundle's message count; a flush's number
  ctx.fillStyle = "#111";
  ctx.font = "10px sans-serif";
  for (let j = 0; j < labels.length; j += 3) ctx.fillText(String(labels[j + 2]), labels[j] + 3, labels[j + 1] + LANE_H / 2);
  if (Number.isFinite(cut) && cut >= t0 && cut <= t1) {
    const x = LEFT + (cut - t0) * scale;
    ctx.strokeStyle = "#c0392b";
    ctx.beginPath();
    ctx.moveTo(x + 0.5, AXIS_H);
    ctx.lineTo(x + 0.5, height);
    ctx.stroke();
  }
  const shown = [];
  for (let j = 2; j < labels.length && shown.length < LABELS_REPORTED; j += 3) shown.push(String(labels[j]));
  return { drawn, rects: rectCount, labels: shown };
}

// The box under (x, y), or null: {run, row} where row is the ring's physical index.
export function hitTest(x, y, width, runs, layout, view) {
  if (x < LEFT || x > LEFT + plotWidth(width)) return null;
  const lane = layout.lanes.find((l) => y >= l.y && y < l.y + LANE_H);
  if (!lane) return null;
  const scale = plotWidth(width) / (view.t1 - view.t0);
  const t = view.t0 + (x - LEFT) / scale;
  const slack = 1 / scale; // one pixel, so sub-pixel boxes can be hovered
  const r = runs[lane.run];
  const { start, end, worker } = r.events.cols;
  let best = null;
  let bestDist = Infinity;
  r.events.forEach((i) => {
    if (worker[i] !== lane.worker || start[i] > t + slack || end[i] < t - slack) return;
    if (view.cut !== undefined && start[i] > view.cut) return;
    const d = Math.abs((start[i] + end[i]) / 2 - t);
    if (d < bestDist) {
      bestDist = d;
      best = i;
    }
  });
  return best === null ? null : { run: lane.run, row: best };
}

// Staleness of the gradients a backward box received: staleness rows of its worker and node in its span.
export function stalenessOf(r, row) {
  const { start, end, worker, node } = r.events.cols;
  const st = r.staleness.cols;
  const found = [];
  r.staleness.forEach((j) => {
    if (st.node[j] === node[row] && st.worker[j] === worker[row] && st.time[j] >= start[row] && st.time[j] <= end[row]) {
      found.push(st.value[j]);
    }
  });
  return found;
}

const MAX_ARROW_BOXES = 3000;

// Arrows for messages that crossed between workers, inferred from the graph's edges: a forward box's
// message came from the latest earlier forward box of the same key on a predecessor node; a backward
// box's gradient from the latest earlier box of the same key on a successor node (its backward, or a
// loss's forward). Drawn only when at most one box per 3 px is in view. Returns the arrows drawn, or -1 if too many
// boxes were in view to try.
export function drawArrows(ctx, width, runs, layout, view) {
  const scale = plotWidth(width) / Math.max(1e-12, view.t1 - view.t0);
  const cut = view.cut ?? Infinity;
  const x = (t) => LEFT + (t - view.t0) * scale;
  const limit = Math.min(MAX_ARROW_BOXES, plotWidth(width) / 3); // beyond ~1 box per 3 px arrows are a blur
  let laneBase = 0;
  let count = 0;
  ctx.strokeStyle = "rgba(60, 60, 60, 0.7)";
  ctx.fillStyle = "rgba(60, 60, 60, 0.7)";
  ctx.lineWidth = 1;
  for (const r of runs) {
    const edges = r.info.edges || [];
    const laneY = layout.lanes.slice(laneBase, laneBase + r.info.workers).map((l) => l.y + LANE_H / 2);
    laneBase += r.info.workers;
    if (edges.length === 0) continue;
    const preds = new Map();
    const succs = new Map();
    for (const [a, b] of edges) {
      if (!preds.has(b)) preds.set(b, new Set());
      preds.get(b).add(a);
      if (!succs.has(a)) succs.set(a, new Set());
      succs.get(a).add(b);
    }
    const { start, end, worker, phase, node, key } = r.events.cols;
    const visible = [];
    let tooMany = false;
    r.events.forEach((i) => {
      if (tooMany || start[i] > view.t1 || end[i] < view.t0 || start[i] > cut) return;
      visible.push(i);
      if (visible.length > limit) tooMany = true;
    });
    if (tooMany) return -1;
    const byKey = new Map();
    for (const i of visible) {
      if (!byKey.has(key[i])) byKey.set(key[i], []);
      byKey.get(key[i]).push(i);
    }
    for (const b of visible) {
      const ph = phase[b];
      if (ph > 1) continue;
      const from = ph === 0 ? preds.get(node[b]) : succs.get(node[b]);
      if (!from) continue;
      let best = -1;
      for (const c of byKey.get(key[b])) {
        if (c === b || !from.has(node[c]) || end[c] > start[b] + 1e-9) continue;
        if (ph === 0 && phase[c] !== 0) continue;
        if (best < 0 || end[c] > end[best]) best = c;
      }
      if (best < 0 || worker[best] === worker[b] || worker[b] >= laneY.length || worker[best] >= laneY.length) continue;
      const x0 = x(end[best]);
      const y0 = laneY[worker[best]];
      const x1 = x(start[b]);
      const y1 = laneY[worker[b]];
      ctx.beginPath();
      ctx.moveTo(x0, y0);
      ctx.lineTo(x1, y1);
      ctx.stroke();
      const angle = Math.atan2(y1 - y0, x1 - x0);
      ctx.beginPath();
      ctx.moveTo(x1, y1);
      ctx.lineTo(x1 - 6 * Math.cos(angle - 0.4), y1 - 6 * Math.sin(angle - 0.4));
      ctx.lineTo(x1 - 6 * Math.cos(angle + 0.4), y1 - 6 * Math.sin(angle + 0.4));
      ctx.fill();
      count++;
    }
  }
  return count;
}
