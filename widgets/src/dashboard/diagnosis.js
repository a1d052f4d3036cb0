// What the dashboard says about a run's reliability, from the status Python sends with every frame
// (Run.status): the watchdog's diagnosis of a stuck run (runtime/watchdog.py: why it stopped, what it
// concludes, the keys in flight, each worker's queue and activity, the nodes still holding state for a key)
// and the count of keys skipped for NaN/inf (on_nonfinite="skip"). Pure functions: no DOM here.

const MAX_KEYS_SHOWN = 10;
const MAX_HELD_SHOWN = 12;
const MAX_STATES_SHOWN = 3;

// the diagnosis as lines of text, the most telling first; [] when there is none
export function diagnosisLines(d) {
  if (!d) return [];
  const keys = Object.entries(d.keys_in_flight || {});
  const shown = keys
    .slice(0, MAX_KEYS_SHOWN)
    .map(([k, n]) => `${k} (${n} message${n === 1 ? "" : "s"})`)
    .join(", ");
  const more = keys.length > MAX_KEYS_SHOWN ? ` and ${keys.length - MAX_KEYS_SHOWN} more` : "";
  const lines = [
    `The run is stuck: ${d.reason}.`,
    d.conclusion,
    `Keys in flight: ${shown || "none"}${more}`,
  ];
  const flushes = Object.keys(d.flushes_in_flight || {});
  if (flushes.length) lines.push(`Flushes in flight: ${flushes.join(", ")}`);
  (d.workers || []).forEach((what, w) => {
    lines.push(`Worker ${w}: ${what}, ${(d.queue_depth || [])[w] ?? 0} queued`);
  });
  const held = d.held || [];
  for (const h of held.slice(0, MAX_HELD_SHOWN)) {
    const states = h.states || [];
    const extra = states.length > MAX_STATES_SHOWN ? ` and ${states.length - MAX_STATES_SHOWN} more` : "";
    lines.push(
      `${h.kind} '${h.node}' (worker ${h.worker}) holds key ${h.key}: ${h.what}` +
        (states.length ? ` [${states.slice(0, MAX_STATES_SHOWN).join(", ")}${extra}]` : ""),
    );
  }
  if (held.length > MAX_HELD_SHOWN) lines.push(`… and ${held.length - MAX_HELD_SHOWN} more nodes holding state`);
  return lines;
}

// " · skipped 3 keys (NaN/inf)" for the stats line, or "" when none was skipped
export function skippedText(status) {
  const n = (status && status.nonfinite_skipped) || 0;
  return n ? ` · skipped ${n} key${n === 1 ? "" : "s"} (NaN/inf)` : "";
}

// Restarts after a lost worker (train(..., max_failures=N)): how many, and the last one's worker and cause.
export function restartText(status) {
  const n = (status && status.restarts) || 0;
  if (!n) return "";
  const last = status.last_restart || {};
  return ` · restarted ${n}× (last: worker ${last.worker} lost, back to epoch ${last.epoch}: ${last.cause})`;
}
