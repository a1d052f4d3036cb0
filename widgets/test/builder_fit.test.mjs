// How a graph first appears in the builder (src/builder/fit.js, layout.js): the layout direction chosen
// by the graph's shape, the initial zoom and canvas height (labels readable, the graph fitted when it
// can be), and the lanes and paths of loop back-edges.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  CANVAS_MAX_H,
  CANVAS_MIN_H,
  CONTROLS_GUTTER,
  FIT_PADDING,
  LABEL_FONT_PX,
  READABLE_ZOOM,
  allInView,
  chooseDirection,
  fitViewport,
  graphShape,
  loopLanes,
  loopPoints,
  roundedPath,
  routeLoops,
} from "../src/builder/fit.js";
import { dagreLayout, nodeSize, portStrips } from "../src/builder/layout.js";

// A node as Python's view describes it (amp_notebook/ui/builder_view.py), with only what layout reads.
function node(id, inputs = ["in"], outputs = ["out"]) {
  return { id, inputs, outputs: outputs.map((port) => ({ port, width: 8 })), errors: [], cell: null };
}

function edge(source, target, { sourceHandle = "out", targetHandle = "in", loop = false } = {}) {
  return { id: `${source}:${sourceHandle}->${target}:${targetHandle}`, source, sourceHandle, target, targetHandle, loop };
}

// x -> n1 -> ... -> n{k} (a chain of k + 1 nodes)
function chain(k) {
  const nodes = [node("x", [])];
  const edges = [];
  for (let i = 1; i <= k; i++) {
    nodes.push(node(`n${i}`));
    edges.push(edge(i === 1 ? "x" : `n${i - 1}`, `n${i}`));
  }
  return { nodes, edges };
}

// k inputs into one Concat: two layers, k nodes wide
function fan(k) {
  const ins = Array.from({ length: k }, (_, i) => `in${i}`);
  const nodes = [...ins.map((_, i) => node(`x${i}`, [])), node("cat", ins)];
  return { nodes, edges: ins.map((port, i) => edge(`x${i}`, "cat", { targetHandle: port })) };
}

// The RNN of the paper's Fig. 2 in miniature: h0 -> phi -> step -> more, and more:true back to phi:in1.
function loop() {
  const nodes = [node("h0", []), node("phi", ["in0", "in1"]), node("step"), node("more", ["in"], ["true", "false"]), node("out")];
  const edges = [
    edge("h0", "phi", { targetHandle: "in0" }),
    edge("phi", "step"),
    edge("step", "more"),
    edge("more", "phi", { sourceHandle: "true", targetHandle: "in1", loop: true }),
    edge("more", "out", { sourceHandle: "false" }),
  ];
  return { nodes, edges };
}

test("layers: the longest path from the inputs, loop back-edges left out", () => {
  assert.deepEqual([graphShape(chain(9)).depth, graphShape(chain(9)).breadth], [10, 1]);
  assert.deepEqual([graphShape(fan(6)).depth, graphShape(fan(6)).breadth], [2, 6]);
  const shape = graphShape(loop());
  assert.deepEqual(shape.layers.map((l) => l.map((n) => n.id)), [["h0"], ["phi"], ["step"], ["more"], ["out"]]);
});

test("a cycle without a marked back-edge does not hang the layering", () => {
  const g = { nodes: [node("a"), node("b")], edges: [edge("a", "b"), edge("b", "a")] };
  const shape = graphShape(g);
  assert.equal(shape.layers.flat().length, 2);
});

test("long chains run top to bottom, wide shallow graphs left to right", () => {
  for (const width of [586, 816, 1200]) {
    assert.equal(chooseDirection(chain(9), width).direction, "TB", `chain at ${width} px`);
    assert.equal(chooseDirection(chain(200), width).direction, "TB", `long chain at ${width} px`);
    assert.equal(chooseDirection(fan(8), width).direction, "LR", `fan at ${width} px`);
    assert.equal(chooseDirection(loop(), width).direction, "TB", `loop at ${width} px`);
  }
  const c = chooseDirection(chain(9), 816);
  assert.ok(c.zoom.TB > c.zoom.LR);
});

test("a small graph opens at zoom 1, centred, in a canvas of the minimum height", () => {
  const bounds = { x: 20, y: 20, width: 200, height: 100 };
  const fit = fitViewport(bounds, 800);
  assert.equal(fit.zoom, 1);
  assert.equal(fit.height, CANVAS_MIN_H);
  assert.ok(fit.fits);
  const left = bounds.x * fit.zoom + fit.x;
  const top = bounds.y * fit.zoom + fit.y;
  assert.ok(Math.abs(left - (CONTROLS_GUTTER + (800 - CONTROLS_GUTTER - FIT_PADDING - 200) / 2)) < 1e-9);
  assert.ok(Math.abs(top - (CANVAS_MIN_H - 100) / 2) < 1e-9);
});

test("a taller graph gets a canvas as tall as it needs, up to the maximum", () => {
  const fit = fitViewport({ x: 0, y: 0, width: 300, height: 600 }, 800);
  assert.equal(fit.zoom, 1);
  assert.equal(fit.height, 600 + 2 * FIT_PADDING);
  const tall = fitViewport({ x: 0, y: 0, width: 300, height: 900 }, 800);
  assert.equal(tall.height, CANVAS_MAX_H);
  assert.ok(tall.zoom < 1 && tall.zoom >= READABLE_ZOOM && tall.fits);
  assert.ok(Math.abs(900 * tall.zoom - (CANVAS_MAX_H - 2 * FIT_PADDING)) < 1e-9);
});

test("never below the readable zoom: a graph too big opens showing its start", () => {
  assert.ok(READABLE_ZOOM * LABEL_FONT_PX >= 10, "labels at the readable zoom are at least 10 px");
  const bounds = { x: 40, y: 30, width: 400, height: 5000 };
  const fit = fitViewport(bounds, 800);
  assert.equal(fit.zoom, READABLE_ZOOM);
  assert.equal(fit.fits, false);
  assert.equal(fit.height, CANVAS_MAX_H);
  assert.ok(Math.abs(bounds.y * fit.zoom + fit.y - FIT_PADDING) < 1e-9, "the top of the graph at the padding");
  const wide = fitViewport({ x: 40, y: 30, width: 5000, height: 300 }, 800);
  assert.ok(Math.abs(40 * wide.zoom + wide.x - CONTROLS_GUTTER) < 1e-9, "the left of the graph beside the zoom buttons");
});

test("a fixed height is kept and limits the zoom", () => {
  const fit = fitViewport({ x: 0, y: 0, width: 300, height: 600 }, 800, { fixedHeight: 550 });
  assert.equal(fit.height, 550);
  assert.ok(Math.abs(fit.zoom - (550 - 2 * FIT_PADDING) / 600) < 1e-9);
  assert.deepEqual(fitViewport(null, 800), { x: 0, y: 0, zoom: 1, height: CANVAS_MIN_H, fits: true });
});

test("whether a box is all in view", () => {
  const b = { x: 0, y: 0, width: 100, height: 100 };
  assert.ok(allInView(b, { x: 10, y: 10, zoom: 1 }, 200, 200));
  assert.ok(!allInView(b, { x: 150, y: 10, zoom: 1 }, 200, 200));
  assert.ok(!allInView(b, { x: 10, y: 10, zoom: 3 }, 200, 200));
});

test("top-to-bottom boxes name their ports only where the names say something", () => {
  assert.deepEqual(portStrips(node("a")), { inputs: false, outputs: false });
  assert.deepEqual(portStrips(node("c", ["in0", "in1"], ["true", "false"])), { inputs: true, outputs: true });
  assert.deepEqual(portStrips(node("l", ["logits", "target"], [])), { inputs: true, outputs: false });
  const broken = { ...node("a"), errors: [{ port: "out", message: "not connected" }] };
  assert.deepEqual(portStrips(broken), { inputs: false, outputs: true });
  assert.ok(nodeSize(node("c", ["in0", "in1"]), "TB").height > nodeSize(node("a"), "TB").height);
  assert.ok(nodeSize(node("s", ["in"], ["o0", "o1", "o2", "o3", "o4"]), "TB").width > nodeSize(node("a"), "TB").width);
});

test("dagre lays a loop out in layers going down, its back-edge left out", () => {
  const g = loop();
  const pos = dagreLayout(g, "TB");
  assert.ok(pos.h0[1] < pos.phi[1] && pos.phi[1] < pos.step[1] && pos.step[1] < pos.more[1]);
  const lr = dagreLayout(g, "LR");
  assert.ok(lr.h0[0] < lr.phi[0] && lr.phi[0] < lr.step[0] && lr.step[0] < lr.more[0]);
});

test("loop lanes run beside the nodes they pass; nested loops do not share a lane", () => {
  const box = (x, y, width = 100, height = 30) => ({ x, y, width, height });
  const boxes = new Map([
    ["a", box(0, 0)],
    ["b", box(0, 100)],
    ["wide", box(50, 200, 300)],
    ["c", box(0, 300)],
    ["below", box(0, 500, 900)], // not between the loops' ends: ignored
  ]);
  const inner = { id: "inner", source: "c", target: "b" };
  const outer = { id: "outer", source: "c", target: "a" };
  const lanes = loopLanes(boxes, [outer, inner], "TB");
  assert.ok(lanes.get("inner") > 350, "right of the widest node it passes");
  assert.ok(lanes.get("inner") < 900, "the node below the loop does not push it out");
  assert.ok(lanes.get("outer") > lanes.get("inner"), "the outer loop goes round the inner one");
});

test("a loop's path leaves its source, goes by its lane and enters its target", () => {
  const pts = loopPoints(100, 300, 150, 50, 400, "TB");
  assert.deepEqual(pts[0], [100, 300]);
  assert.deepEqual(pts[pts.length - 1], [150, 50]);
  assert.ok(pts[1][1] > 300, "leaves downwards");
  assert.ok(pts[pts.length - 2][1] < 50, "enters from above");
  assert.ok(pts.some(([x]) => x === 400));
  const d = roundedPath(pts, 8);
  assert.match(d, /^M 100 300 /);
  assert.match(d, / L 150 50$/);
  assert.equal((d.match(/ Q /g) || []).length, 4, "four rounded corners");
  const lr = loopPoints(300, 100, 50, 150, 400, "LR");
  assert.ok(lr[1][0] > 300 && lr[lr.length - 2][0] < 50 && lr.some(([, y]) => y === 400));
});

test("routing gives each loop edge its lane and counts the loop in the bounds", () => {
  const g = loop();
  const pos = dagreLayout(g, "TB");
  const nodes = g.nodes.map((n) => ({ id: n.id, type: "op", position: { x: pos[n.id][0], y: pos[n.id][1] }, data: { node: n } }));
  const edges = g.edges.map((e) => ({ ...e, type: e.loop ? "loop" : undefined }));
  const { edges: drawn, bounds } = routeLoops(nodes, edges, "TB");
  const back = drawn.find((e) => e.type === "loop");
  assert.equal(back.data.direction, "TB");
  const right = Math.max(...nodes.map((n) => n.position.x + nodeSize(n.data.node, "TB").width));
  assert.ok(back.data.lane > right);
  assert.ok(bounds.x + bounds.width > back.data.lane);
  assert.equal(drawn.filter((e) => e.data).length, 1);
});

test("a graph wider than the canvas opens at its first node, the box still covering the canvas", () => {
  const bounds = { x: 0, y: 0, width: 3000, height: 400 };
  const at = (start) => fitViewport(bounds, 800, { start });
  const middle = at({ x: 1500, y: 0 });
  assert.ok(Math.abs(1500 * middle.zoom + middle.x - CONTROLS_GUTTER) < 1e-9, "the first node at the left edge");
  const far = at({ x: 2990, y: 0 }); // near the right end: as far right as the box goes, no empty canvas
  assert.ok(Math.abs(3000 * far.zoom + far.x - (800 - FIT_PADDING)) < 1e-9);
  const first = at({ x: 0, y: 0 });
  assert.ok(Math.abs(first.x - CONTROLS_GUTTER) < 1e-9);
});

test("the first node of what is drawn: the topmost top to bottom, the leftmost left to right", () => {
  const nodes = [
    { id: "a", type: "op", position: { x: 500, y: 0 }, data: { node: node("a", []) } },
    { id: "b", type: "op", position: { x: 0, y: 200 }, data: { node: node("b") } },
  ];
  assert.deepEqual(routeLoops(nodes, [], "TB").start, { x: 500, y: 0 });
  assert.deepEqual(routeLoops(nodes, [], "LR").start, { x: 0, y: 200 });
});
