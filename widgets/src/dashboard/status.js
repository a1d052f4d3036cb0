// The lines above the Gantt: per run, what it is doing (live: epoch, keys done and in flight, throughput,
// recent training loss and accuracy, utilization, elapsed, keys skipped for NaN/inf, restarts after a lost
// worker, and on the native engine a line of where each worker's time went, worded by text.js;
// replay: duration, boxes, utilization, final validation accuracy), an error from the run or the feed, the watchdog's diagnosis of a stuck run, and a note
// (where an export or a checkpoint was written). It also keeps the root element's test hooks about what was
// received: data-boxes, data-boxes-per-worker, data-held, data-frames, data-skipped, data-restarts,
// data-diagnosis.

import { html } from "./dom.js";
import { formatTime } from "./axes.js";
import { diagnosisLines, restartText, skippedText } from "./diagnosis.js";
import { formatPercent, liveStatusText, workerTimeText } from "./text.js";

export function createStatus(dash) {
  const stats = html`<div class="amp-stats"></div>`;
  const error = html`<div class="amp-error" hidden></div>`;
  const note = html`<div class="amp-note" hidden></div>`;
  const diagnosis = html`<pre class="amp-diagnosis" hidden></pre>`;

  function update(frames) {
    const { runs, live, root } = dash;
    const parts = [];
    runs.forEach((r) => {
      const m = r.meta || {};
      const util = (m.utilization || []).map((u) => `${Math.round(u * 100)}%`).join(" ");
      if (live) {
        const s = m.status || {};
        const last = r.samples[r.samples.length - 1] || {};
        const workers = workerTimeText(s.worker_time);
        parts.push(liveStatusText(s, m, last) + skippedText(s) + restartText(s) + (workers ? `\n${workers}` : ""));
        root.dataset.skipped = String(s.nonfinite_skipped || 0);
        root.dataset.restarts = String(s.restarts || 0);
        showDiagnosis(s.diagnosis);
      } else {
        const ep = r.epochs;
        const acc = ep.length ? ep[ep.length - 1].val_accuracy : null;
        parts.push(
          `${r.info.label}: ${formatTime(m.duration_s || 0)} · ${m.rows ?? r.events.total} boxes · utilization ${util || "–"}` +
            (acc !== null && acc !== undefined ? ` · final val accuracy ${formatPercent(acc)}` : ""),
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

  function showError(message) {
    error.hidden = false;
    error.textContent = message;
    dash.root.dataset.error = message;
  }

  function showDiagnosis(d) {
    const lines = diagnosisLines(d);
    diagnosis.hidden = lines.length === 0;
    diagnosis.textContent = lines.join("\n");
    if (lines.length) dash.root.dataset.diagnosis = lines[1];
  }

  function showNote(text) {
    note.hidden = false;
    note.textContent = text;
  }

  return { els: [stats, error, diagnosis, note], update, showError, showNote };
}
