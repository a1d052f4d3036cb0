// A compound cell (LSTM, GRU, Tree-LSTM leaf/branch: IR nodes tagged meta["cell"]) drawn collapsed into one
// box: its name, what it holds, the workers its nodes run on, and its problems. Edges from outside attach
// to its one input and one output handle (left and right, or top and bottom when the layout runs top to
// bottom); double-click expands it again.
import { memo } from "react";
import { Handle, Position } from "@xyflow/react";
import { workerColour } from "./OpNode.jsx";

function CellNode({ data }) {
  const { name, members, kinds, workers, errors, colourBy, direction } = data;
  const tb = direction === "TB";
  const style = {};
  if (colourBy === "worker" && workers.length === 1) {
    style.borderColor = workerColour(workers[0]);
    style.background = `${workerColour(workers[0])}1c`;
  }
  const summary = Object.entries(kinds)
    .map(([kind, n]) => (n > 1 ? `${n} ${kind}` : kind))
    .join(", ");
  return (
    <div className={`amp-node amp-cell${errors ? " amp-has-errors" : ""}`} style={style} data-cell={name} data-members={members.length} title="double-click to expand">
      <Handle type="target" position={tb ? Position.Top : Position.Left} id="in" className="amp-handle" />
      <div className="amp-node-head">
        <span className="amp-node-kind">cell</span>
        <span className="amp-node-name">{name}</span>
        {errors > 0 && <span className="amp-badge">{errors}</span>}
      </div>
      <div className="amp-cell-body">
        {members.length} nodes: {summary}
        <div className="amp-cell-workers">
          {workers.map((w) => (
            <span key={w} className="amp-worker" style={{ background: workerColour(w) }}>
              w{w}
            </span>
          ))}
        </div>
      </div>
      <Handle type="source" position={tb ? Position.Bottom : Position.Right} id="out" className="amp-handle" />
    </div>
  );
}

export default memo(CellNode);

// The nodes and edges to draw when the cells in `collapsed` are shown as one box each. `sizes` holds the
// boxes' sizes as React Flow measured them (a box is made anew on every render; React Flow counts a node
// drawn only once it carries its measured size).
export function collapseCells(nodes, edges, collapsed, colourBy, direction, sizes = {}) {
  if (collapsed.size === 0) return { nodes, edges };
  const cellOf = new Map();
  const groups = new Map();
  for (const n of nodes) {
    const cell = n.data.node.cell;
    if (!cell || !collapsed.has(cell)) continue;
    cellOf.set(n.id, cell);
    if (!groups.has(cell)) groups.set(cell, []);
    groups.get(cell).push(n);
  }
  const shown = nodes.filter((n) => !cellOf.has(n.id));
  for (const [cell, members] of groups) {
    const kinds = {};
    const workers = new Set();
    let errors = 0;
    for (const m of members) {
      const node = m.data.node;
      kinds[node.label] = (kinds[node.label] || 0) + 1;
      if (node.worker != null) workers.add(node.worker);
      errors += node.errors.length;
    }
    shown.push({
      id: `cell:${cell}`,
      type: "cell",
      position: {
        x: Math.min(...members.map((m) => m.position.x)),
        y: Math.min(...members.map((m) => m.position.y)),
      },
      data: { name: cell, members: members.map((m) => m.id), kinds, workers: [...workers].sort((a, b) => a - b), errors, colourBy, direction },
      selected: members.some((m) => m.selected),
      ...(sizes[`cell:${cell}`] ? { measured: sizes[`cell:${cell}`] } : {}),
    });
  }
  const seen = new Set();
  const shownEdges = [];
  for (const e of edges) {
    const src = cellOf.get(e.source);
    const dst = cellOf.get(e.target);
    if (src && src === dst) continue; // inside one collapsed cell
    const edge = { ...e };
    if (src) Object.assign(edge, { source: `cell:${src}`, sourceHandle: "out" });
    if (dst) Object.assign(edge, { target: `cell:${dst}`, targetHandle: "in" });
    if (src || dst) {
      edge.id = `${edge.source}:${edge.sourceHandle}->${edge.target}:${edge.targetHandle}`;
      edge.deletable = false;
      if (seen.has(edge.id)) continue;
      seen.add(edge.id);
    }
    shownEdges.push(edge);
  }
  return { nodes: shown, edges: shownEdges };
}
