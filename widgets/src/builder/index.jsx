// The graph builder's front end (anywidget ESM). Python owns the graph: the builder draws Python's `view`
// with React Flow and turns user gestures into intents sent with model.send(...). Only node positions of a
// drag in progress, the selection and what is collapsed live here.
//
// Where things are:
//   index.jsx             this file: the widget's entry and the Builder, which puts the parts together
//   Toolbar.jsx           buttons and selects above the canvas
//   useGraphView.js       Python's view -> React Flow nodes (kept measured) and edges; layout of nodes without positions
//   layout.js, fit.js     dagre layout and box sizes; layout direction, initial zoom, canvas height, loop lanes
//   InitialView.jsx       applies fit.js to a fresh view; layout/render timings once the nodes are measured
//   useCanvasGestures.js  drags, drops, connections, keys -> intents
//   OpNode.jsx, CellNode.jsx, LoopEdge.jsx   what one node, collapsed cell or loop back-edge looks like
//   panels.jsx, Lanes.jsx, Overlays.jsx      palette and inspector, worker lanes, notices and export
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { createRoot } from "react-dom/client";
import { Background, Controls, MiniMap, ReactFlow, ReactFlowProvider, useReactFlow } from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import "./styles.css";
import OpNode, { workerColour } from "./OpNode.jsx";
import CellNode, { collapseCells } from "./CellNode.jsx";
import LoopEdge from "./LoopEdge.jsx";
import Toolbar from "./Toolbar.jsx";
import InitialView from "./InitialView.jsx";
import Overlays from "./Overlays.jsx";
import { Inspector, Palette } from "./panels.jsx";
import Lanes from "./Lanes.jsx";
import { useFitViewCount, useKeepSelectedInView, useTrait } from "./hooks.js";
import { useGraphView, useRemeasure } from "./useGraphView.js";
import { useCanvasGestures } from "./useCanvasGestures.js";
import { CANVAS_MIN_H, allInView, routeLoops } from "./fit.js";

const nodeTypes = { op: OpNode, cell: CellNode };
const edgeTypes = { loop: LoopEdge };
const AUTO_COLLAPSE_NODES = 30; // graphs larger than this open with their compound cells collapsed
const REFIT_MIN_PX = 24; // a change of the builder's width that fits the graph again (less: a scrollbar)

// The compound cells of a view (IR nodes tagged meta["cell"]) and which of them are collapsed: a different
// set of cells (another graph) starts collapsed when the graph is big, expanded when it is small.
function useCells(view) {
  const [collapsed, setCollapsed] = useState(() => new Set());
  const cellNames = useMemo(() => {
    const names = new Set();
    if (view && view.nodes) for (const n of view.nodes) if (n.cell) names.add(n.cell);
    return [...names].sort();
  }, [view]);
  const cellKey = cellNames.join("\u0000");
  useEffect(() => {
    const big = view && view.nodes && view.nodes.length > AUTO_COLLAPSE_NODES;
    setCollapsed(big ? new Set(cellNames) : new Set());
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [cellKey]);
  const toggleCell = useCallback((cell, collapse) => {
    setCollapsed((old) => {
      const next = new Set(old);
      if (collapse) next.add(cell);
      else next.delete(cell);
      return next;
    });
  }, []);
  return { cellNames, collapsed, setCollapsed, toggleCell };
}

function Builder({ model }) {
  const view = useTrait(model, "view");
  const palette = useTrait(model, "palette");
  const zoo = useTrait(model, "zoo");
  const notice = useTrait(model, "notice");
  const exported = useTrait(model, "export");
  const runStatus = useTrait(model, "run_status");
  const fixedHeight = useTrait(model, "height");
  const flow = useReactFlow();
  const rootRef = useRef(null);
  const canvasRef = useRef(null);
  const anchor = useRef(null); // where the user dropped a node, for the layout of what Python adds there
  const [colourBy, setColourBy] = useState("group");
  const [hoverLane, setHoverLane] = useState(null); // data-worker of the lane under a dragged node
  // the node whose properties the inspector shows: the one last clicked, while it is the only one selected
  // (a drag selects a node too, but opening the inspector then would narrow the canvas under the drag)
  const [inspected, setInspected] = useState(null);
  const [canvasHeight, setCanvasHeight] = useState(() => fixedHeight || CANVAS_MIN_H);
  const [overflowing, setOverflowing] = useState(false); // part of the graph out of view: the minimap shows
  const heightRef = useRef(canvasHeight); // the canvas height, already when a fit has just set it
  heightRef.current = canvasHeight;
  const applyHeight = useCallback((h) => {
    heightRef.current = h;
    setCanvasHeight(h);
  }, []);
  const send = useCallback((intent) => model.send({ type: "intent", intent }), [model]);

  const { nodes, setNodes, edges, setEdges, direction, pending, tick, refit } = useGraphView({ view, colourBy, anchor, canvasRef, send });
  const { cellNames, collapsed, setCollapsed, toggleCell } = useCells(view);
  const [cellSizes, setCellSizes] = useState({}); // measured sizes of collapsed cells' boxes
  const shown = useMemo(
    () => collapseCells(nodes, edges, collapsed, colourBy, direction, cellSizes),
    [nodes, edges, collapsed, colourBy, direction, cellSizes],
  );
  const drawn = useMemo(() => routeLoops(shown.nodes, shown.edges, direction), [shown, direction]);
  useRemeasure(shown.nodes);
  const drawnRef = useRef(null); // for callbacks: the latest bounds and start of what is drawn
  drawnRef.current = drawn;

  const placement = colourBy === "worker";
  const gestures = useCanvasGestures({ flow, send, nodes, setNodes, edges, setEdges, placement, setHoverLane, toggleCell, anchor, rootRef, setCellSizes });

  useEffect(() => {
    if (fixedHeight) setCanvasHeight(fixedHeight);
  }, [fixedHeight]);

  // The builder's width changed (the page, or a dashboard opening beside it in its row): fit the graph to
  // the canvas again, as for a fresh view. The inspector and the lanes narrow only the canvas, not the
  // builder, and leave the view as it is (useKeepSelectedInView pans to the selected node).
  const fittedWidth = useRef(0);
  useEffect(() => {
    const root = rootRef.current;
    if (!root || typeof ResizeObserver === "undefined") return undefined;
    let frame = 0;
    const observer = new ResizeObserver(() => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(() => {
        if (Math.abs(root.clientWidth - fittedWidth.current) >= REFIT_MIN_PX) refit(false);
      });
    });
    observer.observe(root);
    return () => {
      observer.disconnect();
      cancelAnimationFrame(frame);
    };
  }, [refit]);

  // another graph loaded: the inspector of the last one closes (Python clears its notices and export)
  const generation = view ? view.generation : 0;
  useEffect(() => setInspected(null), [generation]);

  const selectedIds = nodes.filter((n) => n.selected).map((n) => n.id);
  const selected = selectedIds.length === 1 && selectedIds[0] === inspected && view ? view.nodes.find((n) => n.id === inspected) : null;
  const entry = selected ? palette.find((p) => p.kind === selected.kind) : null;
  useKeepSelectedInView(selected ? selected.id : null, rootRef, canvasRef, flow);
  const onFitView = useFitViewCount(flow, rootRef);
  const onMoveEnd = useCallback((_event, viewport) => {
    const c = canvasRef.current;
    if (c) setOverflowing(!allInView(drawnRef.current.bounds, viewport, c.clientWidth, heightRef.current));
  }, []);
  const minimapColour = useCallback(
    (n) => {
      if (n.type === "cell") return n.data.errors ? "#e15759" : "#777";
      return colourBy === "worker" ? workerColour(n.data.node.worker) : n.data.node.errors.length ? "#e15759" : "#bbb";
    },
    [colourBy],
  );
  const workers = view ? view.workers : 2;
  const general = view ? view.general_errors : [];

  return (
    <div
      className="amp-builder"
      ref={rootRef}
      tabIndex={0}
      onKeyDown={gestures.onKeyDown}
      data-nodes={view ? view.nodes.length : 0}
      data-edges={view ? view.edges.length : 0}
      data-problems={view ? view.n_problems : 0}
      data-revision={view ? view.revision : 0}
      data-graph={view ? view.name : ""}
      data-direction={direction}
      data-collapsed-cells={collapsed.size}
      data-shown-nodes={shown.nodes.length}
    >
      <Toolbar
        model={model}
        view={view}
        send={send}
        zoo={zoo}
        runStatus={runStatus}
        colourBy={colourBy}
        setColourBy={setColourBy}
        cellNames={cellNames}
        cellsCollapsed={collapsed.size > 0}
        onToggleCells={() => {
          setCollapsed(collapsed.size ? new Set() : new Set(cellNames));
          refit();
        }}
      />
      <div className="amp-main" style={{ height: `${canvasHeight}px` }}>
        <Palette palette={palette} onAdd={gestures.addAtCentre} />
        <div className="amp-canvas" ref={canvasRef} onDrop={gestures.onDrop} onDragOver={gestures.onDragOver}>
          <ReactFlow
            nodes={shown.nodes}
            edges={drawn.edges}
            nodeTypes={nodeTypes}
            edgeTypes={edgeTypes}
            {...gestures.canvas}
            onMoveEnd={onMoveEnd}
            onNodeClick={(_event, node) => setInspected(node.id)}
            autoPanOnNodeDrag={hoverLane === null}
            zoomOnDoubleClick={false}
            deleteKeyCode={null}
            minZoom={0.05}
            proOptions={{ hideAttribution: true }}
          >
            <Background gap={16} />
            {overflowing && <MiniMap pannable zoomable nodeColor={minimapColour} />}
            <Controls showInteractive={false} onFitView={onFitView} />
            <InitialView
              pending={pending}
              tick={tick}
              drawn={drawnRef}
              rootRef={rootRef}
              canvasRef={canvasRef}
              fittedWidth={fittedWidth}
              model={model}
              fixedHeight={fixedHeight}
              canvasHeight={canvasHeight}
              setCanvasHeight={applyHeight}
              setOverflowing={setOverflowing}
            />
          </ReactFlow>
          <Overlays general={general} notice={notice} exported={exported} hint={selected || !view || !view.nodes.length ? null : "click a node to edit it"} />
        </div>
        {placement && view && view.lanes && (
          <Lanes lanes={view.lanes} hoverLane={hoverLane} onPin={(names, worker) => send({ type: "pin", nodes: names, worker })} />
        )}
        {selected && <Inspector node={selected} entry={entry} workers={workers} send={send} settled={`${view.revision}:${notice.seq ?? 0}`} />}
      </div>
    </div>
  );
}

export default {
  render({ model, el }) {
    const root = createRoot(el);
    root.render(
      <ReactFlowProvider>
        <Builder model={model} />
      </ReactFlowProvider>,
    );
    // keep JupyterLab's notebook shortcuts from acting on keys typed in the builder (modifiers pass)
    const stop = (e) => {
      if (!["Shift", "Control", "Alt", "Meta"].includes(e.key)) e.stopPropagation();
    };
    el.addEventListener("keydown", stop);
    return () => {
      el.removeEventListener("keydown", stop);
      root.unmount();
    };
  },
};
