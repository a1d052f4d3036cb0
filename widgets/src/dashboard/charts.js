// Small canvas charts under the Gantt: lines over time (queue depth, keys in flight, loss and accuracy) and
// staleness histograms, each with axes: time ticks in s/ms/µs along the bottom on the Gantt's time
// scale, value ticks and the unit on the left (a second axis on the right for accuracy). Each draws at
// most a few thousand segments whatever the number of rows, and returns the ticks it drew (the panel
// puts them on the canvas's data attributes, for tests).

import { LEFT, RIGHT, formatTime, formatValue, plotWidth, timeTicks, valueAxis } from "./axes.js";

export const LANE_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"];
const TITLE_H = 16;
const X_LABELS_H = 15;
const GRID = "#eceef1";
const AXIS = "#999";
const TEXT = "#666";
const ACCURACY_TICKS = [0, 0.25, 0.5, 0.75, 1];
const DOT_R = 2.5;

function frame(ctx, width, height, title) {
  ctx.clearRect(0, 0, width, height);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = "#333";
  ctx.font = "11px sans-serif";
  ctx.textBaseline = "top";
  ctx.textAlign = "left";
  ctx.fillText(title, 4, 2);
}

// The unit of a value axis, written upwards beside it.
function unitLabel(ctx, text, x, yMid, color = TEXT) {
  ctx.save();
  ctx.translate(x, yMid);
  ctx.rotate(-Math.PI / 2);
  ctx.fillStyle = color;
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  ctx.fillText(text, 0, 0);
  ctx.restore();
}

// Time ticks along the bottom of a plot (and light grid lines up to its top). Returns their labels.
function timeAxis(ctx, t0, t1, top, bottom, plotW) {
  const ticks = timeTicks(t0, t1, plotW);
  const scale = plotW / Math.max(1e-12, t1 - t0);
  ctx.strokeStyle = GRID;
  ctx.beginPath();
  for (const { t } of ticks) {
    const x = Math.round(LEFT + (t - t0) * scale) + 0.5;
    ctx.moveTo(x, top);
    ctx.lineTo(x, bottom);
  }
  ctx.stroke();
  ctx.strokeStyle = AXIS;
  ctx.beginPath();
  ctx.moveTo(LEFT, bottom + 0.5);
  ctx.lineTo(LEFT + plotW, bottom + 0.5);
  for (const { t } of ticks) {
    const x = Math.round(LEFT + (t - t0) * scale) + 0.5;
    ctx.moveTo(x, bottom);
    ctx.lineTo(x, bottom + 4);
  }
  ctx.stroke();
  ctx.fillStyle = TEXT;
  ctx.textBaseline = "top";
  for (const { t, label } of ticks) {
    const x = LEFT + (t - t0) * scale;
    const w = ctx.measureText(label).width;
    ctx.textAlign = "left";
    ctx.fillText(label, Math.min(LEFT + plotW - w, Math.max(LEFT, x - w / 2)), bottom + 4);
  }
  return ticks.map((k) => k.label);
}

// Value ticks on the left (side "left") or right of a plot, with grid lines from the left axis only.
function valueTicks(ctx, ticks, y, side, plotW, step, percent) {
  const labels = [];
  ctx.textBaseline = "middle";
  if (side === "left") {
    ctx.strokeStyle = GRID;
    ctx.beginPath();
    for (const v of ticks) {
      const yy = Math.round(y(v)) + 0.5;
      ctx.moveTo(LEFT, yy);
      ctx.lineTo(LEFT + plotW, yy);
    }
    ctx.stroke();
  }
  ctx.strokeStyle = AXIS;
  ctx.beginPath();
  const x = side === "left" ? LEFT : LEFT + plotW;
  ctx.moveTo(x + 0.5, y(ticks[0]));
  ctx.lineTo(x + 0.5, y(ticks[ticks.length - 1]));
  for (const v of ticks) {
    const yy = Math.round(y(v)) + 0.5;
    ctx.moveTo(x, yy);
    ctx.lineTo(side === "left" ? x - 4 : x + 4, yy);
  }
  ctx.stroke();
  ctx.fillStyle = TEXT;
  ctx.textAlign = side === "left" ? "right" : "left";
  for (const v of ticks) {
    const label = percent ? `${Math.round(v * 100)}%` : formatValue(v, step);
    ctx.fillText(label, side === "left" ? x - 6 : x + 6, y(v));
    labels.push(label);
  }
  ctx.textAlign = "left";
  return labels;
}

// series: [{label, color, points: [[t, v], ...], axis?: "right", dots?: true (a dot at every point, so a
// series of one point shows)}] on the shared time axis [t0, t1]. A series without a value is left out of
// the legend; with none at all the plot says `opts.empty`. opts: {unit, integer, steps, right: {unit} (a
// 0-100% axis for the series with axis "right"), empty}. Returns {xTicks, yTicks, yUnit, y2Ticks, y2Unit,
// legend (the labels in it)}.
export function drawTimeLines(ctx, width, height, title, allSeries, t0, t1, opts = {}) {
  const series = allSeries.filter((s) => s.points.some((p) => p[1] !== null && p[1] !== undefined));
  frame(ctx, width, height, title);
  const top = TITLE_H + 6;
  const bottom = height - X_LABELS_H - 2;
  const plotW = plotWidth(width);
  const scaleX = plotW / Math.max(1e-12, t1 - t0);
  let vmax = opts.vmax ?? 0;
  for (const s of series) {
    if (s.axis === "right") continue;
    for (const [t, v] of s.points) if (t >= t0 && t <= t1 && v > vmax) vmax = v;
  }
  const maxTicks = Math.max(2, Math.min(5, Math.floor((bottom - top) / 18) + 1));
  const left = valueAxis(vmax, maxTicks, { integer: !!opts.integer });
  const yLeft = (v) => bottom - (v / left.top) * (bottom - top);
  const yRight = (v) => bottom - v * (bottom - top);
  const out = { yUnit: opts.unit || "", y2Unit: opts.right ? opts.right.unit : "" };
  out.xTicks = timeAxis(ctx, t0, t1, top, bottom, plotW);
  out.yTicks = valueTicks(ctx, left.ticks, yLeft, "left", plotW, left.step, false);
  unitLabel(ctx, opts.unit || "", 12, (top + bottom) / 2);
  out.y2Ticks = [];
  if (opts.right) {
    const ticks = maxTicks >= 5 ? ACCURACY_TICKS : [0, 0.5, 1];
    out.y2Ticks = valueTicks(ctx, ticks, yRight, "right", plotW, 0.25, true);
    unitLabel(ctx, opts.right.unit, width - 8, (top + bottom) / 2);
  }

  ctx.save();
  ctx.beginPath();
  ctx.rect(LEFT - DOT_R, top - DOT_R, plotW + 2 * DOT_R, bottom - top + 2 * DOT_R);
  ctx.clip();
  for (const s of series) {
    const y = s.axis === "right" ? yRight : yLeft;
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 1.2;
    ctx.beginPath();
    let started = false;
    let lastV = null;
    for (const [t, v] of s.points) {
      if (v === null || v === undefined) continue;
      const x = LEFT + (t - t0) * scaleX;
      if (x < LEFT - 1) {
        lastV = v;
        continue;
      }
      if (x > LEFT + plotW + 1) break;
      if (!started) {
        ctx.moveTo(LEFT, y(lastV ?? v));
        started = true;
      }
      if (opts.steps && lastV !== null) ctx.lineTo(x, y(lastV));
      ctx.lineTo(x, y(v));
      lastV = v;
    }
    ctx.stroke();
    if (s.dots) {
      ctx.fillStyle = s.color;
      for (const [t, v] of s.points) {
        if (v === null || v === undefined || t < t0 || t > t1) continue;
        ctx.beginPath();
        ctx.arc(LEFT + (t - t0) * scaleX, y(v), DOT_R, 0, 2 * Math.PI);
        ctx.fill();
      }
    }
  }
  ctx.restore();
  if (series.length === 0 && opts.empty) {
    ctx.fillStyle = "#999";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillText(opts.empty, LEFT + plotW / 2, (top + bottom) / 2);
    ctx.textAlign = "left";
  }

  // legend in the title row, in each series' colour
  ctx.textBaseline = "top";
  let legendX = Math.max(LEFT + 4, ctx.measureText(title).width + 16);
  out.legend = [];
  for (const s of series) {
    const text = s.axis === "right" && opts.right ? `${s.label} (right)` : s.label;
    ctx.fillStyle = s.color;
    ctx.fillText(text, legendX, 2);
    out.legend.push(s.label);
    legendX += ctx.measureText(text).width + 12;
    if (legendX > width - 40) break;
  }
  return out;
}

// Per-pixel maximum of a per-row value (queue depth) for each worker over [t0, t1]: series for drawTimeLines.
export function depthSeries(runStore, laneOffset, t0, t1, width) {
  const { start, worker, depth } = runStore.events.cols;
  const nW = runStore.info.workers;
  const cols = Math.max(1, Math.floor(plotWidth(width)));
  const maxes = Array.from({ length: nW }, () => new Int32Array(cols).fill(-1));
  const scale = cols / Math.max(1e-12, t1 - t0);
  runStore.events.forEach((i) => {
    const t = start[i];
    if (t < t0 || t > t1) return;
    const c = Math.min(cols - 1, Math.floor((t - t0) * scale));
    const w = worker[i];
    if (w < nW && depth[i] > maxes[w][c]) maxes[w][c] = depth[i];
  });
  return maxes.map((m, w) => {
    const points = [];
    for (let c = 0; c < cols; c++) if (m[c] >= 0) points.push([t0 + c / scale, m[c]]);
    return { label: `w${w}`, color: LANE_COLORS[(laneOffset + w) % LANE_COLORS.length], points };
  });
}

const HIST_GUTTER = 34; // count ticks left of each histogram

// hist: {node: [[staleness, count], ...]}: one small bar chart per node, side by side, each with staleness
// (updates) ticks under its bars and gradient-count ticks on its left. Returns {xTicks, yTicks} of the
// first histogram, and the units.
export function drawHistograms(ctx, width, height, title, hist) {
  frame(ctx, width, height, title);
  const out = { xUnit: "staleness (updates)", yUnit: "gradients", xTicks: [], yTicks: [] };
  const nodes = Object.keys(hist || {});
  if (nodes.length === 0) {
    ctx.fillStyle = "#999";
    ctx.fillText("no gradients yet", 4, 20);
    return out;
  }
  const shown = nodes.slice(0, 8);
  const cellW = (width - 8) / shown.length;
  shown.forEach((name, k) => {
    const pairs = hist[name];
    const x0 = 4 + k * cellW;
    const top = 32;
    const bottom = height - 30;
    let vmax = 0;
    let cmax = 0;
    let total = 0;
    let sum = 0;
    for (const [v, c] of pairs) {
      vmax = Math.max(vmax, v);
      cmax = Math.max(cmax, c);
      total += c;
      sum += v * c;
    }
    const left = x0 + HIST_GUTTER;
    const plotW = Math.max(10, cellW - HIST_GUTTER - 10);
    const bins = vmax + 1;
    const bw = plotW / bins;
    const counts = valueAxis(cmax, 3, { integer: true });
    const y = (c) => bottom - (c / counts.top) * (bottom - top);
    ctx.fillStyle = "#3a7bd5";
    for (const [v, c] of pairs) ctx.fillRect(left + v * bw, y(c), Math.max(1, bw - 1), bottom - y(c));
    // axes: counts on the left, staleness values under the bars' middles
    ctx.strokeStyle = AXIS;
    ctx.beginPath();
    ctx.moveTo(left - 0.5, top);
    ctx.lineTo(left - 0.5, bottom + 0.5);
    ctx.lineTo(left + plotW, bottom + 0.5);
    ctx.stroke();
    ctx.fillStyle = TEXT;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    const yLabels = counts.ticks.map((c) => {
      const label = formatValue(c, counts.step);
      ctx.fillText(label, left - 4, y(c));
      return label;
    });
    const values = valueAxis(vmax, Math.max(2, Math.min(bins, Math.floor(plotW / 28))), { integer: true });
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const xLabels = values.ticks.filter((v) => v <= vmax).map((v) => {
      const label = String(v);
      ctx.fillText(label, left + (v + 0.5) * bw, bottom + 3);
      return label;
    });
    ctx.textAlign = "left";
    ctx.fillStyle = "#333";
    ctx.fillText(name.length > 22 ? name.slice(0, 21) + "…" : name, x0, 17);
    ctx.fillStyle = "#777";
    let summary = `mean ${(sum / Math.max(1, total)).toFixed(2)} · max ${vmax}`;
    if (ctx.measureText(summary).width > cellW - 8) summary = `max ${vmax}`;
    ctx.fillText(summary, x0, height - 13);
    if (k === 0) Object.assign(out, { xTicks: xLabels, yTicks: yLabels });
  });
  return out;
}

export { formatTime, LEFT, RIGHT };
