// Auto-layout with dagre: left-to-right ranks, node boxes sized by their port count.
import dagre from "@dagrejs/dagre";

export const NODE_WIDTH = 190;

export function nodeHeight(node) {
  const rows = Math.max(node.inputs.length, node.outputs.length, 1);
  return 34 + 20 * rows;
}

// Positions for every node of `view` ({id: [x, y]}), computed from scratch.
export function dagreLayout(view) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: "LR", nodesep: 24, ranksep: 70, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of view.nodes) g.setNode(n.id, { width: NODE_WIDTH, height: nodeHeight(n) });
  for (const e of view.edges) g.setEdge(e.source, e.target, {}, e.id);
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
// user dropped something) or to the right of what is already on the canvas.
export function placeMissing(view, anchor) {
  const missing = view.nodes.filter((n) => !n.position);
  if (missing.length === 0) return {};
  const all = dagreLayout(view);
  if (missing.length === view.nodes.length) return all;
  const placed = view.nodes.filter((n) => n.position);
  const minX = Math.min(...missing.map((n) => all[n.id][0]));
  const minY = Math.min(...missing.map((n) => all[n.id][1]));
  let target = anchor;
  if (!target) {
    const right = Math.max(...placed.map((n) => n.position[0] + NODE_WIDTH));
    const top = Math.min(...placed.map((n) => n.position[1]));
    target = [right + 80, top];
  }
  const out = {};
  for (const n of missing) out[n.id] = [all[n.id][0] - minX + target[0], all[n.id][1] - minY + target[1]];
  return out;
}
