// The charts under the Gantt: queue depth per worker (messages waiting in its inbox), keys in flight, loss
// and accuracy (two axes), on the Gantt's time axis (loss and accuracy of a replay over the whole run);
// and the staleness histogram of each parameterized node over the whole run. Each canvas carries the
// ticks and units it drew as data attributes (data-x-ticks, data-y-ticks, data-y-unit, ...) for tests.

import { html, sizeCanvas } from "./dom.js";
import { LANE_COLORS, depthSeries, drawHistograms, drawTimeLines } from "./charts.js";

const CHART_H = 112;
const HIST_H = 132;

function mark(canvas, drawn) {
  for (const [key, value] of Object.entries(drawn)) {
    canvas.dataset[key] = Array.isArray(value) ? JSON.stringify(value) : String(value);
  }
}

export function createChartsPanel(dash) {
  const queue = html`<canvas class="amp-chart amp-queue"></canvas>`;
  const keys = html`<canvas class="amp-chart amp-keys"></canvas>`;
  const loss = html`<canvas class="amp-chart amp-loss"></canvas>`;
  const hist = html`<canvas class="amp-chart amp-hist"></canvas>`;

  function drawQueues(w, v) {
    const { runs } = dash;
    let offset = 0;
    const depth = [];
    runs.forEach((r) => {
      for (const s of depthSeries(r, offset, v.t0, v.t1, w)) {
        if (runs.length > 1) s.label = `${r.info.label} ${s.label}`;
        depth.push(s);
      }
      offset += r.info.workers;
    });
    const ctx = sizeCanvas(queue, w, CHART_H);
    mark(queue, drawTimeLines(ctx, w, CHART_H, "queue depth per worker", depth, v.t0, v.t1, { steps: true, integer: true, unit: "messages" }));
  }

  // live: rebuilt from the rows (sent with a view's first frame and the run's last), then the samples after
  function drawKeys(w, v) {
    const { runs, live } = dash;
    const series = runs.map((r, ri) => {
      const rebuilt = r.meta?.keys_in_flight || [];
      let points = rebuilt;
      if (live) {
        const after = rebuilt.length ? rebuilt[rebuilt.length - 1][0] : -Infinity;
        points = rebuilt.concat(r.samples.filter((s) => s.t > after).map((s) => [s.t, s.keys_in_flight]));
      }
      return { label: runs.length > 1 ? r.info.label : "keys in flight", color: LANE_COLORS[(ri * 3) % LANE_COLORS.length], points };
    });
    const ctx = sizeCanvas(keys, w, CHART_H);
    mark(keys, drawTimeLines(ctx, w, CHART_H, "keys in flight", series, v.t0, v.t1, { steps: true, integer: true, unit: "keys" }));
  }

  function drawLoss(w, v) {
    const { runs, live } = dash;
    const series = [];
    runs.forEach((r, ri) => {
      const tag = runs.length > 1 ? `${r.info.label} ` : "";
      if (live) {
        series.push({ label: `${tag}train loss (moving avg)`, color: "#c0392b", points: r.samples.map((s) => [s.t, s.loss]) });
        series.push({ label: `${tag}train accuracy (moving avg)`, color: "#27ae60", axis: "right", points: r.samples.map((s) => [s.t, s.accuracy]) });
      }
      // one dot per epoch, at its end (a run of one epoch has one point: a line alone would not show it)
      const ep = r.epochs;
      series.push({ label: `${tag}epoch train loss`, color: ri ? "#8e44ad" : "#e67e22", dots: true, points: ep.map((e) => [e.end_s, e.train_loss]) });
      series.push({
        label: `${tag}val accuracy`,
        color: ri ? "#16a085" : "#2980b9",
        axis: "right",
        dots: true,
        points: ep.map((e) => [e.end_s, e.val_accuracy]),
      });
    });
    // a replay: the whole run, its last epoch's end included (a little after its last box)
    const lastEpoch = Math.max(0, ...runs.map((r) => (r.epochs.length ? r.epochs[r.epochs.length - 1].end_s : 0)));
    const span = live ? v : { t0: 0, t1: Math.max(1e-9, dash.view.latest(), lastEpoch) };
    const ctx = sizeCanvas(loss, w, CHART_H);
    const empty = live ? "no loss reported yet" : "no loss or accuracy in this trace (a TrainResult replayed shows its epochs)";
    const drawn = drawTimeLines(ctx, w, CHART_H, "loss and accuracy", series, span.t0, span.t1, { unit: "loss", right: { unit: "accuracy" }, empty });
    mark(loss, drawn);
  }

  function drawStaleness(w) {
    const { runs } = dash;
    const all = {};
    runs.forEach((r) => {
      for (const [name, pairs] of Object.entries(r.meta?.staleness_hist || {})) {
        all[runs.length > 1 ? `${r.info.label}: ${name}` : name] = pairs;
      }
    });
    const ctx = sizeCanvas(hist, w, HIST_H);
    const title = "gradient staleness per parameterized node, whole run (x: staleness in updates, y: gradients)";
    mark(hist, drawHistograms(ctx, w, HIST_H, title, all));
  }

  return {
    els: [queue, keys, loss, hist],
    // v: the Gantt's time window
    draw(v) {
      const w = dash.width();
      drawQueues(w, v);
      drawKeys(w, v);
      drawLoss(w, v);
      drawStaleness(w);
    },
  };
}
