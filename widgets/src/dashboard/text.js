// The dashboard's words and numbers for people (pure functions, tested in widgets/test/text.test.mjs):
// counts and rates with thousands separators (15,560, not 1.556e+4), epochs counted from 1 (the runtime
// counts from 0), training figures called training figures, and a flush named as one (the update
// messages of flush f carry key -1 - f, so a bare key would read "-7").

import { formatTime } from "./axes.js";

// 15,560 for 15560.3; three significant digits below 100 (52.3, 0.5); "–" for no value
export function formatNumber(v) {
  if (v === null || v === undefined || !Number.isFinite(+v)) return "–";
  const x = +v;
  if (Math.abs(x) >= 100) return String(Math.round(x)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return String(Number(x.toPrecision(3)));
}

export function formatPercent(v) {
  return v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)}%`;
}

function fixed(v, digits = 3) {
  return v === null || v === undefined ? "–" : (+v).toPrecision(digits);
}

// the epoch a status is in, counted from 1 (never past the last)
export function epochForPeople(status) {
  if (status.epoch === null || status.epoch === undefined) return "–";
  return Math.min(status.epoch + 1, status.epochs ?? Infinity);
}

// what a Gantt box is labelled with: a bundle's message count, a flush's number (from 1), or the key
export function boxLabel(key, messages = 1) {
  if (messages > 1) return `${messages}×`;
  return key < 0 ? `flush ${-key}` : String(key);
}

// a message's key as a tooltip names it
export function keyText(key) {
  return key < 0 ? `flush ${-key}` : `key ${key}`;
}

export function runEnded(status) {
  return status.state === "finished" || status.state === "failed";
}

// The status line of a live run. status: Run.status; meta: the feed's last meta (run_throughput,
// keys_in_flight rebuilt from the rows at the end); last: the last sample (throughput over the last
// seconds). An ended run shows its rate over the whole run, and the most keys it had in flight.
export function liveStatusText(status, meta = {}, last = {}) {
  const s = status || {};
  const ended = runEnded(s);
  const rate = ended ? `${formatNumber(meta.run_throughput)} instances/s over the run` : `${formatNumber(last.throughput)} instances/s`;
  const peak = ended && meta.keys_in_flight && meta.keys_in_flight.length ? ` (at most ${Math.max(...meta.keys_in_flight.map((p) => p[1]))})` : "";
  const util = (meta.utilization || []).map((u) => `${Math.round(u * 100)}%`).join(" ");
  return (
    `epoch ${epochForPeople(s)}/${s.epochs ?? "–"} · keys done ${formatNumber(s.keys_done ?? 0)} · in flight ${s.keys_in_flight ?? 0}${peak}` +
    ` · ${rate} · recent train loss ${fixed(s.recent_loss)} · recent train accuracy ${formatPercent(s.recent_accuracy)}` +
    ` · utilization ${util || "–"} · ${formatTime(s.elapsed_s || 0)}`
  );
}

// Where each native worker's time went so far (Run.status worker_time; null on other engines, which give ""):
// per worker the shares of its life in ops, in the engine's own work (taking bundles, credits, handing
// messages on) and waiting for messages, and, once the run has ended, the share it spent without a core.
export function workerTimeText(times) {
  if (!Array.isArray(times) || times.length === 0) return "";
  const share = (s, life) => `${Math.round((100 * (s || 0)) / life)}%`;
  const parts = times.map((t) => {
    const life = t.loop_s > 0 ? t.loop_s : 1;
    const noCore = t.no_core_s === null || t.no_core_s === undefined ? "" : ` · no core ${share(t.no_core_s, life)}`;
    return `w${t.worker} ops ${share(t.ops_s, life)} · engine ${share(t.engine_s, life)} · waiting ${share(t.waiting_s, life)}${noCore}`;
  });
  return `worker time: ${parts.join("; ")}`;
}
