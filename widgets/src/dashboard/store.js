// Bounded column stores for the rows a dashboard view holds: fixed-capacity rings of typed arrays.
// Appending past capacity overwrites the oldest rows, so a view holds at most `capacity` rows however long
// the run. Rows of one worker arrive in time order, so iterating a ring from oldest to newest visits each
// lane's boxes in time order (the Gantt relies on it to merge boxes narrower than a pixel).

const TYPED = {
  f8: Float64Array,
  u1: Uint8Array,
  u2: Uint16Array,
  u4: Uint32Array,
  i4: Int32Array,
};

// One wire buffer (a DataView from the kernel) as a typed array, copying only when it is misaligned.
export function asTyped(view, dtype, n) {
  const Kind = TYPED[dtype];
  if (!Kind) throw new Error(`amp dashboard: unknown column dtype ${dtype}`);
  if (n === 0) return new Kind(0);
  const offset = view.byteOffset;
  if (offset % Kind.BYTES_PER_ELEMENT === 0) return new Kind(view.buffer, offset, n);
  return new Kind(view.buffer.slice(offset, offset + n * Kind.BYTES_PER_ELEMENT));
}

export class Ring {
  // fields: [[name, dtype, default when a frame lacks the column (0 unless given)], ...]
  constructor(fields, capacity) {
    this.capacity = capacity;
    this.fields = fields;
    this.cols = {};
    for (const [name, dtype] of fields) this.cols[name] = new TYPED[dtype](capacity);
    this.clear();
  }

  clear() {
    this.head = 0; // where the next row goes
    this.length = 0;
    this.total = 0; // rows ever appended
  }

  // columns: {name: typed array}, all of length n
  append(columns, n) {
    if (n === 0) return;
    let from = 0;
    if (n > this.capacity) {
      from = n - this.capacity;
      this.total += from;
      n = this.capacity;
    }
    for (const [name, , missing = 0] of this.fields) {
      const dst = this.cols[name];
      const src = columns[name];
      const first = Math.min(n, this.capacity - this.head);
      if (!src) {
        // a column the sender does not have (an older trace): its default value
        dst.fill(missing, this.head, this.head + first);
        if (first < n) dst.fill(missing, 0, n - first);
        continue;
      }
      dst.set(src.subarray(from, from + first), this.head);
      if (first < n) dst.set(src.subarray(from + first, from + n), 0);
    }
    this.head = (this.head + n) % this.capacity;
    this.length = Math.min(this.capacity, this.length + n);
    this.total += n;
  }

  // physical index of the i-th held row, oldest first
  index(i) {
    const start = (this.head - this.length + this.capacity) % this.capacity;
    return (start + i) % this.capacity;
  }

  // calls fn(physicalIndex) for every held row, oldest first, without allocating
  forEach(fn) {
    const cap = this.capacity;
    let p = (this.head - this.length + cap) % cap;
    for (let i = 0; i < this.length; i++) {
      fn(p);
      p += 1;
      if (p === cap) p = 0;
    }
  }
}

export const EVENT_FIELDS = [
  ["start", "f8"],
  ["end", "f8"],
  ["worker", "u2"],
  ["phase", "u1"],
  ["node", "i4"],
  ["key", "i4"],
  ["depth", "i4"],
  ["messages", "i4", 1], // 1, or how many messages a bundle ran as one call
  ["row", "u4"], // the row's index among its worker's rows: a bundle's member keys refer to it
];
const MAX_BUNDLES = 50000; // bundles whose member keys a view keeps (the newest)
export const STALENESS_FIELDS = [
  ["time", "f8"],
  ["worker", "u2"],
  ["node", "i4"],
  ["value", "i4"],
];

// Everything a view holds about one run: its rows, and the per-run figures that come with frames.
export class RunStore {
  constructor(info, capacity) {
    this.info = info; // {label, workers, node_names, parameterized}
    this.events = new Ring(EVENT_FIELDS, capacity);
    this.staleness = new Ring(STALENESS_FIELDS, Math.max(1024, capacity >> 1));
    this.received = new Array(info.workers).fill(0); // boxes received per worker, ever
    this.tMax = 0;
    this.samples = []; // live: {t, keys_in_flight, loss, accuracy, throughput}
    this.epochs = [];
    this.meta = null;
    this.bundles = new Map(); // "worker:row" -> the keys of a bundle's messages, in the order it ran them
  }

  // the keys of the bundle in ring slot i (null for a single message, or when its keys are not held)
  bundleKeys(i) {
    const c = this.events.cols;
    if (c.messages[i] <= 1) return null;
    return this.bundles.get(`${c.worker[i]}:${c.row[i]}`) ?? null;
  }

  reset() {
    this.events.clear();
    this.staleness.clear();
    this.received.fill(0);
    this.tMax = 0;
    this.samples = [];
    this.epochs = [];
    this.bundles.clear();
  }

  // content.columns describes buffers in order: {table, name, dtype, n}
  ingest(content, buffers) {
    const tables = { events: {}, staleness: {}, members: {} };
    const counts = { events: 0, staleness: 0, members: 0 };
    content.columns.forEach((c, i) => {
      tables[c.table][c.name] = asTyped(buffers[i], c.dtype, c.n);
      counts[c.table] = c.n;
    });
    const n = counts.events;
    if (n > 0) {
      const w = tables.events.worker;
      for (let i = 0; i < n; i++) if (w[i] < this.received.length) this.received[w[i]] += 1;
      const end = tables.events.end;
      for (let i = 0; i < n; i++) if (end[i] > this.tMax) this.tMax = end[i];
      this.events.append(tables.events, n);
    }
    if (counts.staleness > 0) this.staleness.append(tables.staleness, counts.staleness);
    if (counts.members > 0) this.addMembers(tables.members, counts.members);
  }

  addMembers(m, n) {
    for (let i = 0; i < n; i++) {
      const id = `${m.worker[i]}:${m.row[i]}`;
      const keys = this.bundles.get(id);
      if (keys) keys.push(m.key[i]);
      else this.bundles.set(id, [m.key[i]]);
    }
    if (this.bundles.size > MAX_BUNDLES) {
      // a Map iterates in insertion order: drop the oldest bundles
      let extra = this.bundles.size - MAX_BUNDLES;
      for (const id of this.bundles.keys()) {
        if (extra-- <= 0) break;
        this.bundles.delete(id);
      }
    }
  }

  addMeta(meta, maxSamples) {
    if (!meta) return;
    this.meta = Object.assign(this.meta || {}, meta);
    if (meta.sample) {
      this.samples.push(meta.sample);
      if (this.samples.length > maxSamples) this.samples.splice(0, this.samples.length - maxSamples);
      if (meta.sample.t > this.tMax) this.tMax = meta.sample.t;
    }
    if (meta.epochs) this.epochs.push(...meta.epochs);
    if (meta.duration_s && meta.duration_s > this.tMax) this.tMax = meta.duration_s;
  }
}
