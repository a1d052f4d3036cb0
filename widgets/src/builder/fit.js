// How a graph first appears on the canvas, as pure functions (tested in widgets/test/builder_fit.test.mjs):
// - the layout direction, chosen by the graph's shape: each direction's extent is estimated from the
//   graph's layers (longest path, loop back-edges left out) and the one that can be shown at the larger
//   zoom wins, so long chains run top to bottom like the paper's Fig. 2 and wide, shallow graphs left to
//   right;
// - the initial viewport and canvas height: the largest zoom (at most 1) that shows the whole graph in
//   the canvas's width and at most CANVAS_MAX_H of height, but never below READABLE_ZOOM (node labels
//   MIN_LABEL_PX on screen); the canvas is as tall as the graph needs at that zoom. A graph too big to
//   fit at a readable size opens at the readable zoom showing its start (top, or left);
// - loop back-edges: a lane beside the nodes they pass, and an orthogonal path with rounded corners.
import { SPACING, nodeSize } from "./layout.js";

export const LABEL_FONT_PX = 13; // .amp-node-kind and .amp-node-name in styles.css
export const MIN_LABEL_PX = 10.4; // a little over 10 px, so rounding never shows them smaller
export const READABLE_ZOOM = MIN_LABEL_PX / LABEL_FONT_PX;
export const CANVAS_MIN_H = 420;
export const CANVAS_MAX_H = 780;
export const FIT_PADDING = 16; // screen px around the graph
export const CONTROLS_GUTTER = 44; // screen px left of it, for React Flow's zoom buttons (bottom left)
const MARGIN = 20; // dagre's marginx/marginy, in flow px

// The graph's layers: each node's rank is the longest path to it from a node without inputs, over the
// edges that are not loop back-edges. Nodes left on a cycle (an invalid graph) go in rank 0.
export function graphShape(view) {
  const ids = view.nodes.map((n) => n.id);
  const indegree = new Map(ids.map((id) => [id, 0]));
  const out = new Map(ids.map((id) => [id, []]));
  for (const e of view.edges) {
    if (e.loop || !indegree.has(e.source) || !indegree.has(e.target)) continue;
    indegree.set(e.target, indegree.get(e.target) + 1);
    out.get(e.source).push(e.target);
  }
  const rank = new Map(ids.map((id) => [id, 0]));
  const queue = ids.filter((id) => indegree.get(id) === 0);
  for (let i = 0; i < queue.length; i++) {
    const u = queue[i];
    for (const v of out.get(u)) {
      rank.set(v, Math.max(rank.get(v), rank.get(u) + 1));
      indegree.set(v, indegree.get(v) - 1);
      if (indegree.get(v) === 0) queue.push(v);
    }
  }
  const layers = [];
  for (const n of view.nodes) {
    const r = rank.get(n.id);
    while (layers.length <= r) layers.push([]);
    layers[r].push(n);
  }
  return { depth: layers.length, breadth: Math.max(0, ...layers.map((l) => l.length)), layers };
}

// The size a dagre layout of `shape` in `direction` will roughly have, in flow px.
export function estimateExtent(shape, direction) {
  const { nodesep, ranksep } = SPACING[direction];
  let along = 0; // the sum over layers, in the direction of the edges
  let across = 0; // the widest layer
  for (const layer of shape.layers) {
    const sizes = layer.map((n) => nodeSize(n, direction));
    const depthOf = (s) => (direction === "TB" ? s.height : s.width);
    const breadthOf = (s) => (direction === "TB" ? s.width : s.height);
    along += Math.max(...sizes.map(depthOf));
    across = Math.max(across, sizes.reduce((a, s) => a + breadthOf(s), 0) + nodesep * (layer.length - 1));
  }
  along += ranksep * Math.max(0, shape.layers.length - 1);
  const [width, height] = direction === "TB" ? [across, along] : [along, across];
  return { width: width + 2 * MARGIN, height: height + 2 * MARGIN };
}

// The zoom at which a box of `extent` fits `canvasWidth` x `maxHeight` (with padding), at most 1.
export function zoomToFit(extent, canvasWidth, maxHeight) {
  const w = Math.max(1, canvasWidth - CONTROLS_GUTTER - FIT_PADDING);
  const h = Math.max(1, maxHeight - 2 * FIT_PADDING);
  return Math.min(1, w / Math.max(1, extent.width), h / Math.max(1, extent.height));
}

// "TB" or "LR": the direction that shows `view` at the larger zoom in a canvas `canvasWidth` wide and at
// most `maxHeight` tall. Within 2% of each other, a graph deeper than it is wide goes top to bottom.
export function chooseDirection(view, canvasWidth, maxHeight = CANVAS_MAX_H) {
  const shape = graphShape(view);
  const zoom = {
    TB: zoomToFit(estimateExtent(shape, "TB"), canvasWidth, maxHeight),
    LR: zoomToFit(estimateExtent(shape, "LR"), canvasWidth, maxHeight),
  };
  let direction;
  if (Math.abs(zoom.TB - zoom.LR) <= 0.02 * Math.max(zoom.TB, zoom.LR)) direction = shape.depth >= shape.breadth ? "TB" : "LR";
  else direction = zoom.TB > zoom.LR ? "TB" : "LR";
  return { direction, zoom, depth: shape.depth, breadth: shape.breadth };
}

// The initial viewport ({x, y, zoom}: flow point p shows at p * zoom + (x, y)) and canvas height for a
// graph whose bounding box (flow px, loop lanes included) is `bounds`. `fixedHeight` > 0 keeps the canvas
// that tall. Along an axis where the graph does not fit, the view starts at `start` (the top-left of the
// graph's first node; default the box's corner) as far as the box allows. Returns `fits`: whether the
// whole graph is in view.
export function fitViewport(bounds, canvasWidth, { fixedHeight = 0, minHeight = CANVAS_MIN_H, maxHeight = CANVAS_MAX_H, start = null } = {}) {
  const pad = FIT_PADDING;
  if (!bounds || !(bounds.width > 0) || !(bounds.height > 0)) {
    return { x: 0, y: 0, zoom: 1, height: fixedHeight || minHeight, fits: true };
  }
  const limitH = fixedHeight || maxHeight;
  let zoom = zoomToFit(bounds, canvasWidth, limitH);
  zoom = Math.max(zoom, READABLE_ZOOM);
  const w = bounds.width * zoom;
  const h = bounds.height * zoom;
  const height = fixedHeight || Math.round(Math.min(maxHeight, Math.max(minHeight, h + 2 * pad)));
  const room = canvasWidth - CONTROLS_GUTTER - pad;
  const fitsX = w <= room + 0.5;
  const fitsY = h <= height - 2 * pad + 0.5;
  // centred where it fits; otherwise the start at the padding, the box still covering the canvas
  const from = start || { x: bounds.x, y: bounds.y };
  // the offset along one axis: the visible stretch starts at `lead` and is `free` long
  const along = (fits, free, lead, lo, size, at) => {
    if (fits) return lead + (free - size * zoom) / 2 - lo * zoom;
    const v = lead - at * zoom;
    return Math.min(lead - lo * zoom, Math.max(v, lead + free - (lo + size) * zoom));
  };
  const x = along(fitsX, room, CONTROLS_GUTTER, bounds.x, bounds.width, from.x);
  const y = along(fitsY, height - 2 * pad, pad, bounds.y, bounds.height, from.y);
  return { x, y, zoom, height, fits: fitsX && fitsY };
}

// The box around `boxes` ([{x, y, width, height}]) and `points` ([[x, y]]), in flow px.
export function graphBounds(boxes, points = []) {
  if (boxes.length === 0) return null;
  let x0 = Infinity;
  let y0 = Infinity;
  let x1 = -Infinity;
  let y1 = -Infinity;
  for (const b of boxes) {
    x0 = Math.min(x0, b.x);
    y0 = Math.min(y0, b.y);
    x1 = Math.max(x1, b.x + b.width);
    y1 = Math.max(y1, b.y + b.height);
  }
  for (const [x, y] of points) {
    x0 = Math.min(x0, x);
    y0 = Math.min(y0, y);
    x1 = Math.max(x1, x);
    y1 = Math.max(y1, y);
  }
  return { x: x0, y: y0, width: x1 - x0, height: y1 - y0 };
}

const LANE_GAP = 30; // from the nodes a loop passes to its lane
const LANE_STEP = 16; // between lanes of loops that pass the same nodes
const LANE_LABEL = 26; // room for a lane's label beyond it
export const LOOP_STUB = 16; // a loop edge leaves its source, and enters its target, this straight

// The lane of each loop back-edge: a coordinate across the flow (an x right of the nodes, top to bottom;
// a y below them, left to right) beyond every node between its two ends, and beyond the lanes of
// shorter loops over the same nodes, so nested loops do not overlap.
// boxes: Map id -> {x, y, width, height}; loops: [{id, source, target}]. Returns Map id -> lane.
export function loopLanes(boxes, loops, direction) {
  const tb = direction === "TB";
  const spans = [];
  for (const e of loops) {
    const s = boxes.get(e.source);
    const t = boxes.get(e.target);
    if (!s || !t) continue;
    const lo = tb ? Math.min(s.y, t.y) : Math.min(s.x, t.x);
    const hi = tb ? Math.max(s.y + s.height, t.y + t.height) : Math.max(s.x + s.width, t.x + t.width);
    let edge = -Infinity; // the far side of the nodes in the span
    for (const b of boxes.values()) {
      const bLo = tb ? b.y : b.x;
      const bHi = tb ? b.y + b.height : b.x + b.width;
      if (bHi < lo || bLo > hi) continue;
      edge = Math.max(edge, tb ? b.x + b.width : b.y + b.height);
    }
    spans.push({ id: e.id, lo, hi, lane: edge + LANE_GAP });
  }
  spans.sort((a, b) => a.hi - a.lo - (b.hi - b.lo));
  const lanes = new Map();
  const done = [];
  for (const s of spans) {
    for (const d of done) if (d.hi >= s.lo && d.lo <= s.hi) s.lane = Math.max(s.lane, d.lane + LANE_STEP);
    done.push(s);
    lanes.set(s.id, s.lane);
  }
  return lanes;
}

// The corner points of a loop edge from its source handle (sx, sy) to its target handle (tx, ty) by way
// of `lane`: top to bottom it leaves downwards and enters from above; left to right it leaves to the
// right and enters from the left.
export function loopPoints(sx, sy, tx, ty, lane, direction) {
  const g = LOOP_STUB;
  if (direction === "TB") {
    return [[sx, sy], [sx, sy + g], [lane, sy + g], [lane, ty - g], [tx, ty - g], [tx, ty]];
  }
  return [[sx, sy], [sx + g, sy], [sx + g, lane], [tx - g, lane], [tx - g, ty], [tx, ty]];
}

// An SVG path through `points` with straight segments and corners rounded by up to `radius`.
export function roundedPath(points, radius = 8) {
  const pts = points.filter((p, i) => i === 0 || p[0] !== points[i - 1][0] || p[1] !== points[i - 1][1]);
  if (pts.length === 0) return "";
  let d = `M ${pts[0][0]} ${pts[0][1]}`;
  for (let i = 1; i < pts.length - 1; i++) {
    const [px, py] = pts[i - 1];
    const [cx, cy] = pts[i];
    const [nx, ny] = pts[i + 1];
    const lenIn = Math.hypot(cx - px, cy - py);
    const lenOut = Math.hypot(nx - cx, ny - cy);
    const r = Math.min(radius, lenIn / 2, lenOut / 2);
    const ax = cx - ((cx - px) / lenIn) * r;
    const ay = cy - ((cy - py) / lenIn) * r;
    const bx = cx + ((nx - cx) / lenOut) * r;
    const by = cy + ((ny - cy) / lenOut) * r;
    d += ` L ${ax} ${ay} Q ${cx} ${cy} ${bx} ${by}`;
  }
  const last = pts[pts.length - 1];
  return `${d} L ${last[0]} ${last[1]}`;
}

const CELL_BOX = { width: 200, height: 90 }; // a collapsed cell's box (CellNode.jsx), roughly

// The edges to draw, each loop back-edge given its lane, and the box around everything drawn (flow px).
// nodes: React Flow nodes ("op" nodes hold Python's node in data.node; "cell" nodes are collapsed cells).
export function routeLoops(nodes, edges, direction) {
  const boxes = new Map();
  for (const n of nodes) {
    const size = n.type === "op" ? nodeSize(n.data.node, direction) : CELL_BOX;
    boxes.set(n.id, { x: n.position.x, y: n.position.y, ...size });
  }
  const loops = edges.filter((e) => e.type === "loop");
  const lanes = loopLanes(boxes, loops, direction);
  const drawn = loops.length ? edges.map((e) => (e.type === "loop" ? { ...e, data: { lane: lanes.get(e.id), direction } } : e)) : edges;
  // each loop's corners (its handles taken at the middle of the boxes' edges) and its label beyond the lane
  const points = [];
  for (const e of loops) {
    const s = boxes.get(e.source);
    const t = boxes.get(e.target);
    if (!s || !t || !lanes.has(e.id)) continue;
    const lane = lanes.get(e.id);
    if (direction === "TB") {
      points.push(...loopPoints(s.x + s.width / 2, s.y + s.height, t.x + t.width / 2, t.y, lane, direction), [lane + LANE_LABEL, t.y]);
    } else {
      points.push(...loopPoints(s.x + s.width, s.y + s.height / 2, t.x, t.y + t.height / 2, lane, direction), [t.x, lane + LANE_LABEL]);
    }
  }
  // the graph's first node: the topmost (top to bottom) or leftmost (left to right), where a view starts
  let start = null;
  for (const b of boxes.values()) {
    const key = direction === "TB" ? [b.y, b.x] : [b.x, b.y];
    if (!start || key[0] < start.key[0] || (key[0] === start.key[0] && key[1] < start.key[1])) start = { key, x: b.x, y: b.y };
  }
  return { edges: drawn, bounds: graphBounds([...boxes.values()], points), start: start && { x: start.x, y: start.y } };
}

// Whether all of `bounds` (flow px) shows in a canvas `width` x `height` under `viewport` ({x, y, zoom}).
export function allInView(bounds, viewport, width, height) {
  if (!bounds) return true;
  const { x, y, zoom } = viewport;
  const left = bounds.x * zoom + x;
  const top = bounds.y * zoom + y;
  return left >= -1 && top >= -1 && left + bounds.width * zoom <= width + 1 && top + bounds.height * zoom <= height + 1;
}
