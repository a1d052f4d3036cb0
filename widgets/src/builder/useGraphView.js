// Python's view -> the nodes and edges React Flow draws. Nodes without a position are laid out here
// (layout.js) and their positions reported back to Python with the layout's direction (a "layout" intent,
// not an undo step). A whole graph laid out at once gets the direction its shape asks for (fit.js), unless
// Python holds one (auto_layout(direction=...), or the positions came from an earlier layout).
//
// `pending` asks InitialView.jsx to fit the canvas to the graph: on the first view, after every layout of
// the whole graph (it also times that layout and its render), and on refit() (cells collapsed or
// expanded, the builder's width changed).
import { useCallback, useEffect, useRef, useState } from "react";
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
      const selected = new Set(same ? old.filter((n) => n.selected).map((n) => n.id) : []);
      return view.nodes.map((n) => {
        const p = n.position || laid[n.id];
        return { id: n.id, type: "op", position: { x: p[0], y: p[1] }, data: { node: n, colourBy, direction: dir }, selected: selected.has(n.id) };
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
