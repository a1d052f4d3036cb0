// The dashboard's reliability text (src/dashboard/diagnosis.js): a stuck run's diagnosis as the status sends it
// (runtime/watchdog.py Diagnosis.as_dict) and the count of keys skipped for NaN/inf.
import { test } from "node:test";
import assert from "node:assert/strict";
import { diagnosisLines, restartText, skippedText } from "../src/dashboard/diagnosis.js";

const stuck = {
  reason: "no message handled for 1.0 s while keys are in flight (watchdog_s=1)",
  conclusion: "nothing is queued and no worker is busy, yet the credits count messages: a message was lost",
  keys_in_flight: { 12: 1, 13: 2 },
  flushes_in_flight: {},
  queue_depth: [0, 3],
  workers: ["idle", "thread ended"],
  held: [
    { node: "linear2", kind: "Linear", worker: 1, key: 12, what: "waits for its backward message",
      states: ["State(key=12)"] },
  ],
};

test("a diagnosis reads: why, the conclusion, keys in flight, each worker, the nodes holding state", () => {
  const lines = diagnosisLines(stuck);
  assert.equal(lines[0], "The run is stuck: no message handled for 1.0 s while keys are in flight (watchdog_s=1).");
  assert.equal(lines[1], stuck.conclusion);
  assert.equal(lines[2], "Keys in flight: 12 (1 message), 13 (2 messages)");
  assert.deepEqual(lines.slice(3, 5), ["Worker 0: idle, 0 queued", "Worker 1: thread ended, 3 queued"]);
  assert.equal(lines[5], "Linear 'linear2' (worker 1) holds key 12: waits for its backward message [State(key=12)]");
});

test("long lists are cut, and no diagnosis gives no lines", () => {
  const many = { ...stuck, keys_in_flight: Object.fromEntries([...Array(25).keys()].map((k) => [k, 1])),
    held: [...Array(20).keys()].map((k) => ({ ...stuck.held[0], key: k, states: ["a", "b", "c", "d", "e"] })) };
  const lines = diagnosisLines(many);
  assert.ok(lines[2].endsWith("and 15 more"));
  assert.ok(lines.some((l) => l.includes("[a, b, c and 2 more]")));
  assert.equal(lines[lines.length - 1], "… and 8 more nodes holding state");
  assert.deepEqual(diagnosisLines(null), []);
  assert.deepEqual(diagnosisLines(undefined), []);
});

test("the skip count shows only when keys were skipped", () => {
  assert.equal(skippedText({ nonfinite_skipped: 0 }), "");
  assert.equal(skippedText({}), "");
  assert.equal(skippedText({ nonfinite_skipped: 1 }), " · skipped 1 key (NaN/inf)");
  assert.equal(skippedText({ nonfinite_skipped: 4 }), " · skipped 4 keys (NaN/inf)");
});

test("restarts show only after a lost worker, with the last one's worker, epoch and cause", () => {
  assert.equal(restartText({ restarts: 0, last_restart: null }), "");
  assert.equal(restartText({}), "");
  const last = { number: 2, worker: 1, cause: "RayActorError: the actor died", epoch: 3, at_s: 12.5 };
  assert.equal(
    restartText({ restarts: 2, last_restart: last }),
    " · restarted 2× (last: worker 1 lost, back to epoch 3: RayActorError: the actor died)",
  );
});
