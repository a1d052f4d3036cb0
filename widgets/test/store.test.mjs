// The dashboard's bounded stores: a view holds at most `capacity` rows, oldest dropped first, and every
// lane's rows stay in time order (the Gantt merges touching boxes by walking them in order).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Ring, RunStore, asTyped, EVENT_FIELDS } from "../src/dashboard/store.js";

function columns(from, n) {
  const cols = {};
  for (const [name] of EVENT_FIELDS) cols[name] = name === "start" || name === "end" ? new Float64Array(n) : new Int32Array(n);
  for (let i = 0; i < n; i++) {
    cols.start[i] = from + i;
    cols.end[i] = from + i + 0.5;
    cols.worker[i] = i % 2;
    cols.key[i] = from + i;
  }
  return cols;
}

test("a ring never holds more than its capacity and keeps the newest rows in order", () => {
  const ring = new Ring(EVENT_FIELDS, 10);
  ring.append(columns(0, 7), 7);
  ring.append(columns(7, 7), 7);
  assert.equal(ring.length, 10);
  assert.equal(ring.total, 14);
  const keys = [];
  ring.forEach((i) => keys.push(ring.cols.key[i]));
  assert.deepEqual(keys, [4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
  ring.append(columns(100, 25), 25); // more than the capacity at once: only its newest rows
  const after = [];
  ring.forEach((i) => after.push(ring.cols.key[i]));
  assert.deepEqual(after, [115, 116, 117, 118, 119, 120, 121, 122, 123, 124]);
  assert.equal(ring.total, 39);
});

test("a long stream stays bounded while per-worker counts stay exact", () => {
  const store = new RunStore({ label: "run", workers: 2, node_names: ["a"] }, 1000);
  let next = 0;
  for (let frame = 0; frame < 200; frame++) {
    const n = 97;
    const cols = columns(next, n);
    const content = { columns: EVENT_FIELDS.map(([name, dtype]) => ({ table: "events", name, dtype, n })) };
    const buffers = EVENT_FIELDS.map(([name, dtype]) => {
      const Kind = { f8: Float64Array, u1: Uint8Array, u2: Uint16Array, u4: Uint32Array, i4: Int32Array }[dtype];
      const typed = Kind.from(cols[name]);
      return new DataView(typed.buffer);
    });
    store.ingest(content, buffers);
    next += n;
  }
  assert.equal(store.events.length, 1000);
  assert.equal(store.received[0] + store.received[1], 200 * 97);
  assert.equal(store.tMax, next - 1 + 0.5);
});

test("misaligned wire buffers are copied, aligned ones are viewed", () => {
  const backing = new ArrayBuffer(8 * 4 + 4);
  const view = new DataView(backing, 4, 16);
  const typed = asTyped(view, "f8", 2);
  assert.equal(typed.length, 2);
  const aligned = asTyped(new DataView(backing, 8, 16), "f8", 2);
  assert.equal(aligned.buffer, backing);
});

test("a backward box shows the staleness of the gradients its worker and node received during it", async () => {
  const { stalenessOf } = await import("../src/dashboard/gantt.js");
  const store = new RunStore({ label: "run", workers: 2, node_names: ["a", "b"] }, 100);
  const ev = {
    start: Float64Array.from([0, 1, 1]),
    end: Float64Array.from([0.5, 2, 2]),
    worker: Uint16Array.from([0, 0, 1]),
    phase: Uint8Array.from([0, 1, 1]),
    node: Int32Array.from([0, 1, 1]),
    key: Int32Array.from([7, 7, 8]),
    depth: Int32Array.from([0, 0, 0]),
  };
  store.events.append(ev, 3);
  store.staleness.append(
    { time: Float64Array.from([1.5, 1.6, 3]), worker: Uint16Array.from([0, 1, 0]), node: Int32Array.from([1, 1, 1]), value: Int32Array.from([4, 9, 2]) },
    3,
  );
  assert.deepEqual(stalenessOf(store, store.events.index(1)), [4]); // worker 0's backward on node b
  assert.deepEqual(stalenessOf(store, store.events.index(2)), [9]); // worker 1's
});

test("message arrows join a box to the box of the same key on a neighbouring node on another worker", async () => {
  const { drawArrows, layoutLanes } = await import("../src/dashboard/gantt.js");
  // a -> b -> loss; a on worker 0, b and loss on worker 1; one key: a fwd, b fwd, loss fwd, b bwd, a bwd
  const store = new RunStore({ label: "run", workers: 2, node_names: ["a", "b", "loss"], edges: [[0, 1], [1, 2]] }, 100);
  const rows = [
    [0.0, 0.1, 0, 0, 0], // start, end, worker, phase, node
    [0.2, 0.3, 1, 0, 1],
    [0.3, 0.4, 1, 0, 2],
    [0.4, 0.5, 1, 1, 1],
    [0.6, 0.7, 0, 1, 0],
  ];
  store.events.append(
    {
      start: Float64Array.from(rows.map((r) => r[0])),
      end: Float64Array.from(rows.map((r) => r[1])),
      worker: Uint16Array.from(rows.map((r) => r[2])),
      phase: Uint8Array.from(rows.map((r) => r[3])),
      node: Int32Array.from(rows.map((r) => r[4])),
      key: Int32Array.from(rows.map(() => 3)),
      depth: Int32Array.from(rows.map(() => 0)),
    },
    rows.length,
  );
  const lines = [];
  const ctx = new Proxy({}, {
    get: (_, name) => (name === "lineTo" ? (x, y) => lines.push([x, y]) : () => {}),
    set: () => true,
  });
  const runs = [store];
  const n = drawArrows(ctx, 1074, runs, layoutLanes(runs), { t0: 0, t1: 1 });
  assert.equal(n, 2); // a fwd -> b fwd (worker 0 -> 1) and b bwd -> a bwd (1 -> 0); the rest stay on a worker
});

test("a bundle's member keys follow it by worker and row, and old bundles are forgotten first", () => {
  const store = new RunStore({ label: "run", workers: 2, node_names: ["a"] }, 100);
  const cols = columns(0, 3);
  cols.messages[0] = 1;
  cols.messages[1] = 3;
  cols.messages[2] = 1;
  cols.row[1] = 41;
  store.events.append(cols, 3);
  // members may arrive in a later frame than their bundle's row
  store.addMembers({ worker: Uint16Array.of(1, 1, 1), row: Uint32Array.of(41, 41, 41), key: Int32Array.of(7, 9, 12) }, 3);
  assert.equal(store.bundleKeys(0), null); // one message: no bundle
  assert.deepEqual(store.bundleKeys(1), [7, 9, 12]);
  for (let r = 0; r < 50001; r++) store.addMembers({ worker: Uint16Array.of(0), row: Uint32Array.of(1000 + r), key: Int32Array.of(r) }, 1);
  assert.equal(store.bundles.size, 50000);
  assert.equal(store.bundleKeys(1), null); // the oldest went first
});

test("frames without the newer columns fill their defaults: one message per row", () => {
  const ring = new Ring(EVENT_FIELDS, 4);
  const cols = columns(0, 3);
  delete cols.messages;
  delete cols.row;
  ring.append(cols, 3);
  assert.deepEqual(Array.from(ring.cols.messages.subarray(0, 3)), [1, 1, 1]);
});
