// Axes of the dashboard's charts, as pure functions (tested in widgets/test/axes.test.mjs): the plot area
// every time axis shares with the Gantt (so a time lines up across all of them), "nice" tick values
// (1, 2 or 5 times a power of ten) for a value axis, and time ticks labelled in one unit (s, ms or µs)
// chosen by the size of the times shown, with as many decimals as the step needs.

export const LEFT = 74; // lane labels of the Gantt; value ticks and the unit of a chart
export const RIGHT = 44; // a second value axis (accuracy beside loss); kept empty elsewhere
export const TIME_TICK_PX = 90; // at least this far apart

// The plot's x extent in a canvas `width` wide: [LEFT, LEFT + plotW].
export function plotWidth(width) {
  return Math.max(1, width - LEFT - RIGHT);
}

// The smallest 1, 2 or 5 times a power of ten that is at least `raw` (> 0).
export function niceStep(raw) {
  if (!(raw > 0) || !Number.isFinite(raw)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw * (1 - 1e-12)) return m * p;
  return 10 * p;
}

function decimalsOf(step) {
  return Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
}

// A value axis from 0 for values up to `vmax`: {top, step, ticks} with at most `maxTicks` ticks from 0 to
// `top` (the first tick at or above vmax). Counts (`integer`) step by whole numbers.
export function valueAxis(vmax, maxTicks = 4, { integer = false } = {}) {
  let top = vmax > 0 && Number.isFinite(vmax) ? vmax : integer ? 1 : 1;
  let step = niceStep(top / Math.max(1, maxTicks - 1));
  if (integer) step = Math.max(1, step);
  top = Math.ceil(top / step - 1e-9) * step;
  const d = decimalsOf(step);
  const ticks = [];
  for (let k = 0; k * step <= top + step * 1e-9; k++) ticks.push(Number((k * step).toFixed(d)));
  return { top: Number(top.toFixed(d)), step, ticks };
}

// A fixed value axis over [lo, hi] with the given ticks (accuracy: 0 to 1).
export function fixedAxis(lo, hi, ticks) {
  return { bottom: lo, top: hi, ticks };
}

// Text of a value tick: no more decimals than the step has.
export function formatValue(v, step) {
  const d = decimalsOf(step);
  if (Math.abs(v) >= 1e4) return `${+(v / 1e3).toFixed(Math.max(0, d - 3))}k`;
  return v.toFixed(d);
}

const UNITS = [
  [1, "s"],
  [1e-3, "ms"],
  [1e-6, "µs"],
];

// Ticks of the time axis over [t0, t1] drawn `px` wide, at least TIME_TICK_PX apart: [{t, label}], all in
// one unit (the largest that keeps the biggest time shown at or above 1).
export function timeTicks(t0, t1, px, minPx = TIME_TICK_PX) {
  if (!(t1 > t0)) return [];
  const step = niceStep((t1 - t0) / Math.max(1, px / minPx));
  const biggest = Math.max(Math.abs(t0), Math.abs(t1));
  const [scale, unit] = UNITS.find(([s]) => biggest >= s) || UNITS[UNITS.length - 1];
  const d = decimalsOf(step / scale);
  const ticks = [];
  for (let k = Math.ceil(t0 / step - 1e-9); k * step <= t1 + step * 1e-9; k++) {
    const t = k * step;
    ticks.push({ t, label: `${(t / scale).toFixed(d)} ${unit}` });
  }
  return ticks;
}

// A time or duration in its own unit (hover texts, the stats line, the replay's time slider).
export function formatTime(s) {
  const a = Math.abs(s);
  if (a >= 1) return `${s.toFixed(a >= 10 ? 1 : 2)} s`;
  if (a >= 1e-3) return `${(s * 1e3).toFixed(a >= 1e-2 ? 1 : 2)} ms`;
  return `${(s * 1e6).toFixed(0)} µs`;
}
