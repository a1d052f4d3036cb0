// The placement view's worker lanes: one lane per worker with what it runs (nodes, heavy nodes, pinned
// ones) and its cost (multiply-adds per row of its heavy nodes, from Python's view) as a bar, so moving
// nodes between lanes shows the balance. A node dragged from the canvas and released over a lane is
// pinned to that worker (index.jsx finds the lane under the pointer); the heavy-node chips in a lane can
// be dragged to another lane, or to "heuristic" to unpin them. Every change is a "pin" intent to Python.
import { workerColour } from "./OpNode.jsx";

const CHIP_TYPE = "application/amp-node";

// The lane element under a screen point, or null; its data-worker is a worker index or "" (unpin).
export function laneAt(x, y) {
  for (const el of document.elementsFromPoint(x, y)) {
    const lane = el.closest && el.closest(".amp-lane");
    if (lane) return lane;
  }
  return null;
}

export function laneWorker(lane) {
  const w = lane.dataset.worker;
  return w === "" ? null : Number(w);
}

function formatCost(c) {
  if (c >= 1e6) return `${(c / 1e6).toFixed(1)}M`;
  if (c >= 1e3) return `${(c / 1e3).toFixed(1)}k`;
  return String(c);
}

function Lane({ lane, total, max, hover, onPin }) {
  const share = total ? (100 * lane.cost) / total : 0;
  const drop = (e) => {
    e.preventDefault();
    const name = e.dataTransfer.getData(CHIP_TYPE);
    if (name) onPin([name], lane.worker);
  };
  return (
    <div
      className={`amp-lane${hover ? " amp-lane-hover" : ""}`}
      data-worker={lane.worker}
      data-nodes={lane.nodes}
      data-heavy={lane.heavy}
      data-cost={lane.cost}
      onDragOver={(e) => e.preventDefault()}
      onDrop={drop}
      title="drop a node here to pin it to this worker"
    >
      <div className="amp-lane-head">
        <span className="amp-worker" style={{ background: workerColour(lane.worker) }}>w{lane.worker}</span>
        <span>
          {lane.nodes} nodes · {lane.heavy} heavy{lane.pinned ? ` · ${lane.pinned} pinned` : ""}
        </span>
      </div>
      <div className="amp-lane-bar" title={`${lane.cost} multiply-adds per row (${share.toFixed(0)}% of the graph's)`}>
        <div style={{ width: `${max ? (100 * lane.cost) / max : 0}%`, background: workerColour(lane.worker) }} />
        <span>{formatCost(lane.cost)} MAC/row · {share.toFixed(0)}%</span>
      </div>
      <div className="amp-lane-chips">
        {lane.heavy_nodes.map((name) => (
          <span
            key={name}
            className="amp-lane-chip"
            data-node={name}
            draggable
            onDragStart={(e) => {
              e.dataTransfer.setData(CHIP_TYPE, name);
              e.dataTransfer.effectAllowed = "move";
            }}
          >
            {name}
          </span>
        ))}
      </div>
    </div>
  );
}

export default function Lanes({ lanes, hoverLane, onPin }) {
  const total = lanes.reduce((s, l) => s + l.cost, 0);
  const max = Math.max(0, ...lanes.map((l) => l.cost));
  const unpin = (e) => {
    e.preventDefault();
    const name = e.dataTransfer.getData(CHIP_TYPE);
    if (name) onPin([name], null);
  };
  return (
    <div className="amp-lanes">
      <div className="amp-inspector-sub">worker lanes</div>
      {lanes.map((lane) => (
        <Lane key={lane.worker} lane={lane} total={total} max={max} hover={hoverLane === String(lane.worker)} onPin={onPin} />
      ))}
      <div
        className={`amp-lane amp-lane-auto${hoverLane === "" ? " amp-lane-hover" : ""}`}
        data-worker=""
        onDragOver={(e) => e.preventDefault()}
        onDrop={unpin}
        title="drop a node here to unpin it: the placement heuristic chooses its worker"
      >
        heuristic (unpin)
      </div>
      <div className="amp-muted amp-lane-help">drag a node from the canvas onto a lane to pin it there</div>
    </div>
  );
}
