// The dashboard's axes (src/dashboard/axes.js): nice value ticks from zero, counts in whole numbers, time
// ticks in one unit with the decimals their step needs, and the plot area every time axis shares.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LEFT, RIGHT, TIME_TICK_PX, formatValue, niceStep, plotWidth, timeTicks, valueAxis } from "../src/dashboard/axes.js";

test("nice steps are 1, 2 or 5 times a power of ten, at least the raw step", () => {
  const cases = [
    [0.7, 1],
    [1, 1],
    [1.2, 2],
    [3, 5],
    [7, 10],
    [0.013, 0.02],
    [420, 500],
  ];
  for (const [raw, nice] of cases) assert.ok(Math.abs(niceStep(raw) - nice) < 1e-12, `${raw} -> ${niceStep(raw)}`);
  assert.equal(niceStep(0), 1);
  assert.equal(niceStep(NaN), 1);
});

test("a value axis starts at 0 and ends on the first tick at or above the maximum", () => {
  const a = valueAxis(2.31, 4);
  assert.deepEqual(a.ticks, [0, 1, 2, 3]);
  assert.equal(a.top, 3);
  assert.deepEqual(valueAxis(0.83, 5).ticks, [0, 0.5, 1]);
  assert.deepEqual(valueAxis(0.083, 5).ticks, [0, 0.05, 0.1]);
  assert.deepEqual(valueAxis(0.7, 5).ticks, [0, 0.2, 0.4, 0.6, 0.8]);
  assert.deepEqual(valueAxis(0, 4).ticks, [0, 0.5, 1], "nothing to show yet: a unit axis");
  for (const vmax of [0.3, 1.7, 23, 980]) {
    const { ticks, top } = valueAxis(vmax, 4);
    assert.ok(top >= vmax && ticks.length <= 4 && ticks[ticks.length - 1] === top, `${vmax}: ${ticks}`);
  }
});

test("counts (keys, messages, gradients) tick in whole numbers", () => {
  assert.deepEqual(valueAxis(2, 5, { integer: true }).ticks, [0, 1, 2]);
  assert.deepEqual(valueAxis(7, 4, { integer: true }).ticks, [0, 5, 10]);
  for (const vmax of [1, 3, 9, 17, 120, 4321]) {
    const { ticks, top } = valueAxis(vmax, 4, { integer: true });
    assert.ok(ticks.every(Number.isInteger), `${vmax}: ${ticks}`);
    assert.ok(top >= vmax && ticks.length <= 5, `${vmax}: ${ticks}`);
  }
});

test("value labels have the decimals of their step", () => {
  assert.equal(formatValue(0.4, 0.2), "0.4");
  assert.equal(formatValue(2, 1), "2");
  assert.equal(formatValue(0.05, 0.05), "0.05");
  assert.equal(formatValue(20000, 5000), "20k");
});

test("time ticks: one unit, at least TIME_TICK_PX apart, inside the window", () => {
  const s = timeTicks(0, 12, 900);
  assert.ok(s.length >= 2 && s.length <= 900 / TIME_TICK_PX + 1);
  assert.ok(s.every((k) => k.label.endsWith(" s")), JSON.stringify(s));
  assert.equal(s[0].label, "0 s");
  assert.ok(s.every((k) => k.t >= 0 && k.t <= 12));
  const ms = timeTicks(0.0012, 0.0031, 600);
  assert.ok(ms.every((k) => k.label.endsWith(" ms")), JSON.stringify(ms));
  assert.ok(ms.every((k) => /^\d+\.\d ms$/.test(k.label)), JSON.stringify(ms)); // 0.2 ms steps: one decimal
  const us = timeTicks(0, 4e-5, 600);
  assert.ok(us.every((k) => k.label.endsWith(" µs")), JSON.stringify(us));
  const late = timeTicks(61.2, 61.9, 800); // the unit follows the size of the times, the decimals the step
  assert.ok(late.every((k) => /^61\.\d s$/.test(k.label)), JSON.stringify(late));
  assert.deepEqual(timeTicks(1, 1, 500), []);
  for (let i = 1; i < s.length; i++) assert.ok(((s[i].t - s[i - 1].t) / 12) * 900 >= TIME_TICK_PX - 1e-9);
});

test("every time axis spans the same plot width as the Gantt's", () => {
  assert.equal(plotWidth(1000), 1000 - LEFT - RIGHT);
  assert.equal(plotWidth(10), 1);
});
