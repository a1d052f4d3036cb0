// Python's view -> the nodes and edges React Flow draws. Nodes without a position are laid out here
// (layout.js) and their positions reported back to Python with the layout's direction (a "layout" intent,
// not an undo step). A whole graph laid out at once gets the direction its shape asks for (fit.js), unless
// Python holds one (auto_layout(direction=...), or the positions came from an earlier layout).
//
// `pending` asks InitialView.jsx to fit the canvas to the graph: on the first view, after every layout of
// the whole graph (it also times that layout and its render), and on refit() (cells collapsed or
// expanded, the builder's width changed).
//
// Measured boxes: React Flow hides a node until it has measured its box in the page (size and handle
// positions), and it measures anew every node object handed to it without `measured`. So a node of the
// same graph keeps the `measured` of the object it replaces, unless its handles moved (other ports,
// another direction); React Flow's ResizeObserver still reports a change of its size. useRemeasure
// measures what React Flow holds unmeasured all the same.
import { useCallback, useEffect, useRef, useState } from "react";
import { useReactFlow, useUpdateNodeInternals } from "@xyflow/react";
import { placeMissing } from "./layout.js";
import { chooseDirection } from "./fit.js";

const FALLBACK_CANVAS_WIDTH = 600; // before the canvas is in the page

function toEdge(e, selected) {
  const edge = {
    id: e.id,
    source: e.source,
    sourceHandle: e.sourceHandle,
    target: e.target,
    targetHandle: e.targetHandle,
    label: e.width == null ? "?" : String(e.width),
    className: "amp-edge",
    selected: selected.has(e.id),
  };
  if (e.loop) Object.assign(edge, { type: "loop", className: "amp-edge amp-loop-edge", markerEnd: { type: "arrowclosed", color: "#d9730d" } });
  return edge;
}

const samePorts = (a, b) => a.length === b.length && a.every((p, i) => p === b[i]);

// Whether Python's `node`, drawn in `direction`, has its handles where React Flow measured them on `prev`
// (the React Flow node it replaces): the same input and output ports, the same direction.
function sameHandles(prev, node, direction) {
  const was = prev.data.node;
  return (
    prev.data.direction === direction &&
    samePorts(was.inputs, node.inputs) &&
    samePorts(was.outputs.map((o) => o.port), node.outputs.map((o) => o.port))
  );
}

export function useGraphView({ view, colourBy, anchor, canvasRef, send }) {
  const [nodes, setNodes] = useState([]);
  const [edges, setEdges] = useState([]);
  const [direction, setDirection] = useState("LR");
  const [tick, setTick] = useState(0); // bumped with every new `pending`
  const pending = useRef(null); // {t0, layoutMs, nodes, perf} for InitialView
  const first = useRef(true);
  const generation = useRef(null); // of the view last drawn

  useEffect(() => {
    if (!view || !view.nodes) return;
    const t0 = performance.now();
    const missing = view.nodes.filter((n) => !n.position).length;
    const whole = missing > 0 && missing === view.nodes.length;
    let dir = view.direction || "LR";
    if (whole && !view.direction) {
      const width = (canvasRef.current && canvasRef.current.clientWidth) || FALLBACK_CANVAS_WIDTH;
      dir = chooseDirection(view, width).direction;
    }
    const laid = missing ? placeMissing(view, anchor.current, dir) : {};
    const layoutMs = performance.now() - t0;
    anchor.current = null;
    setDirection(dir);
    const same = view.generation === generation.current; // the same graph: its selection stays
    generation.current = view.generation;
    setNodes((old) => {
      const before = new Map(same ? old.map((n) => [n.id, n]) : []);
      return view.nodes.map((n) => {
        const p = n.position || laid[n.id];
        const prev = before.get(n.id);
        const node = { id: n.id, type: "op", position: { x: p[0], y: p[1] }, data: { node: n, colourBy, direction: dir }, selected: Boolean(prev && prev.selected) };
        if (prev && prev.measured && sameHandles(prev, n, dir)) node.measured = prev.measured;
        return node;
      });
    });
    setEdges((old) => {
      const selected = new Set(same ? old.filter((e) => e.selected).map((e) => e.id) : []);
      return view.edges.map((e) => toEdge(e, selected));
    });
    if (missing) send({ type: "layout", positions: laid, direction: dir });
    // the view a builder is shown with, and a whole new layout, are fitted; an edit is not (a node dropped
    // on an empty canvas stays where it was dropped)
    if (whole || (first.current && view.nodes.length)) {
      pending.current = { t0, layoutMs, nodes: view.nodes.length, perf: missing > 0 };
      setTick((t) => t + 1);
    } else if (missing) {
      pending.current = { t0, layoutMs, nodes: view.nodes.length, perf: true, noFit: true };
      setTick((t) => t + 1);
    }
    first.current = false;
    // colourBy is applied by the effect below without a relayout
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [view]);

  useEffect(() => {
    setNodes((ns) => ns.map((n) => ({ ...n, data: { ...n.data, colourBy } })));
  }, [colourBy]);

  // a new fit of the canvas: keeping its height (cells collapsed or expanded), or as for a fresh view (the
  // builder's width changed). A fit still to come is left to come; one waiting for its render timing is
  // done again and keeps waiting.
  const refit = useCallback((keepHeight = true) => {
    const old = pending.current;
    if (old && !old.fitted) return;
    pending.current = old ? { ...old, fitted: false, noFit: false, keepHeight } : { t0: performance.now(), layoutMs: 0, nodes: 0, perf: false, keepHeight };
    setTick((t) => t + 1);
  }, []);

  return { nodes, setNodes, edges, setEdges, direction, pending, tick, refit };
}

// After every change of the nodes drawn, the nodes React Flow holds without a measured box or handle
// positions are measured directly, in the next frame. React Flow measures a node when its ResizeObserver
// reports it, and re-observes a node only when it loses its measurement; a report that lands between
// React's commit of a newer view and that view's effects (two views in quick succession on a busy CPU:
// the reply to a "layout" intent often comes with the reply to the next edit) is spent on the node
// objects being replaced. Nothing measured the node again then, and it stayed hidden with its edges.
export function useRemeasure(nodes) {
  const flow = useReactFlow();
  const updateNodeInternals = useUpdateNodeInternals();
  useEffect(() => {
    const unmeasured = nodes
      .filter((n) => {
        const internal = flow.getInternalNode(n.id);
        return internal && !(internal.measured?.width && internal.measured?.height && internal.internals.handleBounds);
      })
      .map((n) => n.id);
    if (unmeasured.length) updateNodeInternals(unmeasured);
  }, [nodes, flow, updateNodeInternals]);
}
