// Auto-layout with dagre, top to bottom ("TB") or left to right ("LR"), node boxes sized by their ports.
// Loop back-edges (Python marks them `loop`) are left out of the layered layout: the canvas routes them
// around the side (LoopEdge.jsx), so the rest of the graph reads in one direction.
import dagre from "@dagrejs/dagre";

export const NODE_WIDTH = 190;
const PORT_SLOT = 64; // px per port along a top-to-bottom box's edge
export const HEAD_H = 26; // .amp-node-tb .amp-node-head
export const STRIP_H = 16; // .amp-port-strip: port names along a top-to-bottom box's edge
export const CELL_TAG_H = 15; // .amp-node-cell: the "cell NAME" line of a left-to-right box
export const SPACING = {
  TB: { nodesep: 24, ranksep: 30 },
  LR: { nodesep: 24, ranksep: 70 },
};

// Which port names a top-to-bottom box writes along its top (inputs) and bottom (outputs) edge: only when
// they say something (more than one port, a name other than in/out) or carry a problem; otherwise the
// handle alone shows where the edge attaches.
export function portStrips(node) {
  const named = (ports, plain) => ports.length > 1 || (ports.length === 1 && ports[0] !== plain);
  const outs = node.outputs.map((o) => o.port);
  const erred = new Set(node.errors.map((e) => e.port));
  return {
    inputs: named(node.inputs, "in") || node.inputs.some((p) => erred.has(p)),
    outputs: named(outs, "out") || outs.some((p) => erred.has(p)),
  };
}

// The size of a node's box, as styles.css draws it: left to right, one row per port pair under the
// header; top to bottom, the header between optional strips of port names (a member of a compound cell
// is marked by its outline and a chip in its header there, not by a line of its own, to keep layers thin).
export function nodeSize(node, direction) {
  if (direction === "TB") {
    const strips = portStrips(node);
    const ports = Math.max(node.inputs.length, node.outputs.length);
    const height = HEAD_H + 2 + (strips.inputs ? STRIP_H : 0) + (strips.outputs ? STRIP_H : 0);
    return { width: Math.max(NODE_WIDTH, PORT_SLOT * ports), height };
  }
  const rows = Math.max(node.inputs.length, node.outputs.length, 1);
  return { width: NODE_WIDTH, height: 34 + 20 * rows + (node.cell ? CELL_TAG_H : 0) };
}

// Positions for every node of `view` ({id: [x, y]}), computed from scratch in `direction`.
export function dagreLayout(view, direction) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: direction, ...SPACING[direction], marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of view.nodes) g.setNode(n.id, nodeSize(n, direction));
  for (const e of view.edges) if (!e.loop) g.setEdge(e.source, e.target, {}, e.id);
  dagre.layout(g);
  const out = {};
  for (const n of view.nodes) {
    const p = g.node(n.id);
    out[n.id] = [Math.round(p.x - p.width / 2), Math.round(p.y - p.height / 2)];
  }
  return out;
}

// Positions for the nodes of `view` that have none. With no node placed yet, the whole graph is laid
// out; otherwise the missing ones keep their dagre arrangement, moved as a block to `anchor` (where the
// user dropped something) or after what is already on the canvas (below it top to bottom, to its right
// left to right).
export function placeMissing(view, anchor, direction) {
  const missing = view.nodes.filter((n) => !n.position);
  if (missing.length === 0) return {};
  const all = dagreLayout(view, direction);
  if (missing.length === view.nodes.length) return all;
  const placed = view.nodes.filter((n) => n.position);
  const minX = Math.min(...missing.map((n) => all[n.id][0]));
  const minY = Math.min(...missing.map((n) => all[n.id][1]));
  let target = anchor;
  if (!target && direction === "TB") {
    const left = Math.min(...placed.map((n) => n.position[0]));
    const bottom = Math.max(...placed.map((n) => n.position[1] + nodeSize(n, direction).height));
    target = [left, bottom + 60];
  } else if (!target) {
    const right = Math.max(...placed.map((n) => n.position[0] + NODE_WIDTH));
    const top = Math.min(...placed.map((n) => n.position[1]));
    target = [right + 80, top];
  }
  const out = {};
  for (const n of missing) out[n.id] = [all[n.id][0] - minX + target[0], all[n.id][1] - minY + target[1]];
  return out;
}
