// The dashboard's words and numbers (src/dashboard/text.js): rates and counts people read at a glance,
// epochs from 1, training figures labelled, flushes named as flushes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { boxLabel, epochForPeople, formatNumber, formatPercent, keyText, liveStatusText, workerTimeText } from "../src/dashboard/text.js";

test("numbers: thousands separated, three significant digits below 100, a dash for none", () => {
  assert.equal(formatNumber(15560.3), "15,560");
  assert.equal(formatNumber(1234567), "1,234,567");
  assert.equal(formatNumber(523.4), "523");
  assert.equal(formatNumber(52.34), "52.3");
  assert.equal(formatNumber(0.5), "0.5");
  assert.equal(formatNumber(0), "0");
  assert.equal(formatNumber(-15560), "-15,560");
  assert.equal(formatNumber(null), "–");
  assert.equal(formatNumber(NaN), "–");
  assert.equal(formatPercent(0.9561), "95.6%");
  assert.equal(formatPercent(null), "–");
});

test("epochs count from 1 and never pass the last", () => {
  assert.equal(epochForPeople({ epoch: 0, epochs: 3 }), 1);
  assert.equal(epochForPeople({ epoch: 2, epochs: 3 }), 3);
  assert.equal(epochForPeople({ epoch: 3, epochs: 3 }), 3);
  assert.equal(epochForPeople({}), "–");
});

test("a flush's boxes are labelled with its number, a bundle with its count, a message with its key", () => {
  assert.equal(boxLabel(-7), "flush 7"); // the update messages of flush 6 carry key -1 - 6
  assert.equal(boxLabel(-1), "flush 1");
  assert.equal(boxLabel(12), "12");
  assert.equal(boxLabel(0), "0");
  assert.equal(boxLabel(3, 5), "5×");
  assert.equal(keyText(-7), "flush 7");
  assert.equal(keyText(4), "key 4");
});

const running = {
  state: "running", epoch: 0, epochs: 3, keys_done: 1234, keys_in_flight: 8, recent_loss: 0.53211,
  recent_accuracy: 0.812, elapsed_s: 2.5,
};

test("a running run's line: epoch from 1, the recent rate for people, training figures labelled", () => {
  const text = liveStatusText(running, { utilization: [0.5, 0.25] }, { throughput: 15560.3 });
  assert.match(text, /^epoch 1\/3 · keys done 1,234 · in flight 8 · 15,560 instances\/s · /);
  assert.match(text, /recent train loss 0\.532 · recent train accuracy 81\.2%/);
  assert.match(text, /utilization 50% 25%/);
  assert.doesNotMatch(text, /e\+/);
});

test("a finished run's line: its rate over the whole run and the most keys it had in flight", () => {
  const finished = { ...running, state: "finished", epoch: 2, keys_in_flight: 0 };
  const meta = { run_throughput: 9876.5, keys_in_flight: [[0, 0], [0.1, 8], [2.4, 3], [2.5, 0]] };
  const text = liveStatusText(finished, meta, { throughput: 0 });
  assert.match(text, /^epoch 3\/3 · keys done 1,234 · in flight 0 \(at most 8\) · 9,877 instances\/s over the run · /);
  assert.doesNotMatch(text, /0\.000/);
});

test("the native workers' time: shares of each loop's life, 'no core' only once the run has ended", () => {
  const running = [
    { worker: 0, loop_s: 2.0, ops_s: 1.2, engine_s: 0.5, waiting_s: 0.3, cpu_s: null, no_core_s: null },
    { worker: 1, loop_s: 2.0, ops_s: 0.5, engine_s: 0.1, waiting_s: 1.4, cpu_s: null, no_core_s: null },
  ];
  assert.equal(
    workerTimeText(running),
    "worker time: w0 ops 60% · engine 25% · waiting 15%; w1 ops 25% · engine 5% · waiting 70%",
  );
  const ended = [{ ...running[0], cpu_s: 1.5, no_core_s: 0.36 }];
  assert.equal(workerTimeText(ended), "worker time: w0 ops 60% · engine 25% · waiting 15% · no core 18%");
  assert.equal(workerTimeText(null), ""); // the Python engine counts none
  assert.equal(workerTimeText([]), "");
  assert.equal(workerTimeText([{ worker: 0, loop_s: 0, ops_s: 0, engine_s: 0, waiting_s: 0 }]), "worker time: w0 ops 0% · engine 0% · waiting 0%");
});
