// Small canvas charts under the Gantt: lines over time (queue depth, keys in flight, loss) and staleness
// histograms. Each draws at most a few thousand segments whatever the number of rows.

import { LEFT, formatTime } from "./gantt.js";

export const LANE_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"];

function frame(ctx, width, height, title) {
  ctx.clearRect(0, 0, width, height);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = "#333";
  ctx.font = "11px sans-serif";
  ctx.textBaseline = "top";
  ctx.fillText(title, 4, 2);
}

// series: [{label, color, points: [[t, v], ...]}] on the shared time axis [t0, t1] (left margin = Gantt's)
export function drawTimeLines(ctx, width, height, title, series, t0, t1, opts = {}) {
  frame(ctx, width, height, title);
  const top = 16;
  const bottom = height - 4;
  const plotW = width - LEFT;
  let vmax = opts.vmax ?? 0;
  for (const s of series) for (const [t, v] of s.points) if (t >= t0 && t <= t1 && v > vmax) vmax = v;
  if (!(vmax > 0)) vmax = 1;
  ctx.fillStyle = "#888";
  ctx.fillText(String(+vmax.toPrecision(3)), 4, top);
  const scaleX = plotW / Math.max(1e-12, t1 - t0);
  const y = (v) => bottom - (v / vmax) * (bottom - top);
  let legendX = Math.max(LEFT + 4, ctx.measureText(title).width + 16);
  for (const s of series) {
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
      if (x > width) break;
      if (!started) {
        ctx.moveTo(LEFT, y(lastV ?? v));
        started = true;
      }
      if (opts.steps && lastV !== null) ctx.lineTo(x, y(lastV));
      ctx.lineTo(x, y(v));
      lastV = v;
    }
    ctx.stroke();
    ctx.fillStyle = s.color;
    ctx.fillText(s.label, legendX, 2 + 0);
    legendX += ctx.measureText(s.label).width + 12;
    if (legendX > width - 40) break;
  }
}

// Per-pixel maximum of a per-row value (queue depth) for each worker over [t0, t1]: series for drawTimeLines.
export function depthSeries(runStore, laneOffset, t0, t1, width) {
  const { start, worker, depth } = runStore.events.cols;
  const nW = runStore.info.workers;
  const cols = Math.max(1, Math.floor(width - LEFT));
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

// hist: {node: [[staleness, count], ...]}: one small bar chart per node, side by side
export function drawHistograms(ctx, width, height, title, hist) {
  frame(ctx, width, height, title);
  const nodes = Object.keys(hist || {});
  if (nodes.length === 0) {
    ctx.fillStyle = "#999";
    ctx.fillText("no gradients yet", 4, 20);
    return;
  }
  const shown = nodes.slice(0, 8);
  const cellW = (width - 8) / shown.length;
  shown.forEach((name, k) => {
    const pairs = hist[name];
    const x0 = 4 + k * cellW;
    const top = 30;
    const bottom = height - 16;
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
    const bins = vmax + 1;
    const bw = Math.max(1, (cellW - 10) / bins);
    ctx.fillStyle = "#3a7bd5";
    for (const [v, c] of pairs) {
      const h = (c / cmax) * (bottom - top);
      ctx.fillRect(x0 + v * bw, bottom - h, Math.max(1, bw - 1), h);
    }
    ctx.fillStyle = "#333";
    ctx.fillText(name.length > 18 ? name.slice(0, 17) + "…" : name, x0, 16);
    ctx.fillStyle = "#777";
    ctx.fillText(`mean ${(sum / Math.max(1, total)).toFixed(2)} max ${vmax}`, x0, bottom + 3);
  });
}

export { formatTime };
