// The graph builder's front end (anywidget ESM). Python owns the graph: this file draws Python's `view`
// with React Flow and turns user gestures into intents sent with model.send(...). Only node positions of a
// drag in progress and the selection live here.
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { createRoot } from "react-dom/client";
import {
  Background,
  Controls,
  MiniMap,
  ReactFlow,
  ReactFlowProvider,
  applyEdgeChanges,
  applyNodeChanges,
  useNodesInitialized,
  useReactFlow,
} from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import "./styles.css";
import OpNode, { workerColour } from "./OpNode.jsx";
import CellNode, { collapseCells } from "./CellNode.jsx";
import { ExportDialog, Inspector, Palette } from "./panels.jsx";
import { placeMissing } from "./layout.js";
import Lanes, { laneAt, laneWorker } from "./Lanes.jsx";

const nodeTypes = { op: OpNode, cell: CellNode };
const AUTO_COLLAPSE_NODES = 30; // graphs larger than this open with their compound cells collapsed

function useTrait(model, name) {
  const [value, setValue] = useState(() => model.get(name));
  useEffect(() => {
    const update = () => setValue(model.get(name));
    model.on(`change:${name}`, update);
    return () => model.off(`change:${name}`, update);
  }, [model, name]);
  return value;
}

// Reports how long layout + first render of a freshly laid-out graph took, once React Flow has measured
// every node; the figures go on the root element (data-layout-ms, data-render-ms) and to Python (perf).
function PerfProbe({ pending, tick, rootRef, model }) {
  const initialized = useNodesInitialized();
  useEffect(() => {
    const p = pending.current;
    if (!initialized || !p) return;
    pending.current = null;
    requestAnimationFrame(() => {
      const total = performance.now() - p.t0;
      const root = rootRef.current;
      if (root) {
        root.dataset.layoutMs = p.layoutMs.toFixed(1);
        root.dataset.renderMs = total.toFixed(1);
        root.dataset.perfNodes = String(p.nodes);
      }
      model.set("perf", { nodes: p.nodes, layout_ms: p.layoutMs, render_ms: total });
      model.save_changes();
    });
  }, [initialized, tick, pending, rootRef, model]);
  return null;
}

function Builder({ model }) {
  const view = useTrait(model, "view");
  const palette = useTrait(model, "palette");
  const zoo = useTrait(model, "zoo");
  const notice = useTrait(model, "notice");
  const exported = useTrait(model, "export");
  const runStatus = useTrait(model, "run_status");
  const height = useTrait(model, "height");
  const flow = useReactFlow();
  const rootRef = useRef(null);
  const anchor = useRef(null);
  const pendingPerf = useRef(null);
  const [nodes, setNodes] = useState([]);
  const [edges, setEdges] = useState([]);
  const [colourBy, setColourBy] = useState("group");
  const [shownNotice, setShownNotice] = useState(null);
  const [showExport, setShowExport] = useState(null);
  const [zooChoice, setZooChoice] = useState("rnn");
  const [perfTick, setPerfTick] = useState(0);
  const [collapsed, setCollapsed] = useState(() => new Set());
  const [hoverLane, setHoverLane] = useState(null); // data-worker of the lane under a dragged node
  const dragStart = useRef(null); // where the dragged nodes and the view were, to go back there after a pin
  const nodesRef = useRef([]);
  nodesRef.current = nodes;
  const cellNames = useMemo(() => {
    const names = new Set();
    if (view && view.nodes) for (const n of view.nodes) if (n.cell) names.add(n.cell);
    return [...names].sort();
  }, [view]);
  const cellKey = cellNames.join("\u0000");
  useEffect(() => {
    // a different set of cells (another graph): big graphs start compact, small ones expanded
    const big = view && view.nodes && view.nodes.length > AUTO_COLLAPSE_NODES;
    setCollapsed(big ? new Set(cellNames) : new Set());
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [cellKey]);
  const shown = useMemo(() => collapseCells(nodes, edges, collapsed, colourBy), [nodes, edges, collapsed, colourBy]);

  const send = useCallback((intent) => model.send({ type: "intent", intent }), [model]);

  // Python's view -> React Flow nodes and edges; nodes without a position are laid out here and the
  // positions reported back (a "layout" intent, not an undo step).
  useEffect(() => {
    if (!view || !view.nodes) return;
    const t0 = performance.now();
    const missing = view.nodes.filter((n) => !n.position).length;
    const laid = missing ? placeMissing(view, anchor.current) : {};
    const layoutMs = performance.now() - t0;
    anchor.current = null;
    setNodes((old) => {
      const selected = new Set(old.filter((n) => n.selected).map((n) => n.id));
      return view.nodes.map((n) => {
        const p = n.position || laid[n.id];
        return { id: n.id, type: "op", position: { x: p[0], y: p[1] }, data: { node: n, colourBy }, selected: selected.has(n.id) };
      });
    });
    setEdges((old) => {
      const selected = new Set(old.filter((e) => e.selected).map((e) => e.id));
      return view.edges.map((e) => ({
        id: e.id,
        source: e.source,
        sourceHandle: e.sourceHandle,
        target: e.target,
        targetHandle: e.targetHandle,
        label: e.width == null ? "?" : String(e.width),
        className: "amp-edge",
        selected: selected.has(e.id),
      }));
    });
    if (missing) {
      pendingPerf.current = { t0, layoutMs, nodes: view.nodes.length };
      setPerfTick((t) => t + 1);
      send({ type: "layout", positions: laid });
      if (missing === view.nodes.length) requestAnimationFrame(() => flow.fitView({ padding: 0.1 }));
    }
    // colourBy is applied by the effect below without a relayout
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [view]);

  useEffect(() => {
    setNodes((ns) => ns.map((n) => ({ ...n, data: { ...n.data, colourBy } })));
  }, [colourBy]);

  useEffect(() => {
    if (notice && notice.seq) {
      setShownNotice(notice);
      const timer = setTimeout(() => setShownNotice((cur) => (cur === notice ? null : cur)), 8000);
      return () => clearTimeout(timer);
    }
  }, [notice]);
  useEffect(() => {
    if (exported && exported.seq) setShowExport(exported);
  }, [exported]);

  // changes to a collapsed cell's box move its member nodes
  const onNodesChange = useCallback(
    (changes) =>
      setNodes((ns) => {
        const own = [];
        for (const c of changes) {
          if (c.type === "remove") continue;
          if (!c.id.startsWith("cell:")) {
            own.push(c);
            continue;
          }
          if (c.type !== "position" || !c.position) continue;
          const members = ns.filter((n) => n.data.node.cell === c.id.slice(5));
          const dx = c.position.x - Math.min(...members.map((m) => m.position.x));
          const dy = c.position.y - Math.min(...members.map((m) => m.position.y));
          for (const m of members) {
            own.push({ id: m.id, type: "position", position: { x: m.position.x + dx, y: m.position.y + dy }, dragging: c.dragging });
          }
        }
        return applyNodeChanges(own, ns);
      }),
    [],
  );
  const onEdgesChange = useCallback((changes) => setEdges((es) => applyEdgeChanges(changes.filter((c) => c.type !== "remove"), es)), []);
  const onConnect = useCallback(
    (c) => send({ type: "connect", src: c.source, src_port: c.sourceHandle, dst: c.target, dst_port: c.targetHandle }),
    [send],
  );
  // the IR nodes behind dragged canvas nodes (a collapsed cell's box stands for its members)
  const irNodes = useCallback((dragged) => {
    const out = [];
    for (const n of dragged) {
      if (!n.id.startsWith("cell:")) out.push(n);
      else for (const m of nodesRef.current) if (m.data.node.cell === n.id.slice(5)) out.push(m);
    }
    return out;
  }, []);
  const placement = colourBy === "worker";
  const onNodeDragStart = useCallback(
    (_event, _node, dragged) => {
      const start = {};
      for (const n of irNodes(dragged)) start[n.id] = { ...n.position };
      dragStart.current = { positions: start, viewport: flow.getViewport() };
    },
    [irNodes, flow],
  );
  const onNodeDrag = useCallback(
    (event) => {
      if (!placement) return;
      const lane = laneAt(event.clientX, event.clientY);
      setHoverLane(lane ? lane.dataset.worker : null);
    },
    [placement],
  );
  const onNodeDragStop = useCallback(
    (event, _node, dragged) => {
      setHoverLane(null);
      const members = irNodes(dragged);
      const lane = placement ? laneAt(event.clientX, event.clientY) : null;
      if (lane) {
        // dropped on a worker lane: the nodes go back where they were (and the view where it was, had
        // the drag towards the lanes auto-panned it) and are pinned to that worker
        const { positions: start = {}, viewport } = dragStart.current || {};
        setNodes((ns) => ns.map((n) => (start[n.id] ? { ...n, position: start[n.id] } : n)));
        if (viewport) flow.setViewport(viewport);
        send({ type: "pin", nodes: members.map((n) => n.id), worker: laneWorker(lane) });
        return;
      }
      const positions = {};
      for (const n of members) positions[n.id] = [Math.round(n.position.x), Math.round(n.position.y)];
      send({ type: "move", positions });
    },
    [send, irNodes, placement, flow],
  );
  const toggleCell = useCallback((cell, collapse) => {
    setCollapsed((old) => {
      const next = new Set(old);
      if (collapse) next.add(cell);
      else next.delete(cell);
      return next;
    });
  }, []);
  // double-click: a collapsed cell expands; a node of a cell collapses its cell
  const onNodeDoubleClick = useCallback(
    (_e, node) => {
      if (node.id.startsWith("cell:")) toggleCell(node.id.slice(5), false);
      else if (node.data.node.cell) toggleCell(node.data.node.cell, true);
    },
    [toggleCell],
  );
  const addAt = useCallback(
    (kind, position) => {
      anchor.current = position;
      send({ type: "add_node", kind, position });
    },
    [send],
  );
  const onDrop = useCallback(
    (e) => {
      e.preventDefault();
      const kind = e.dataTransfer.getData("application/amp-kind") || e.dataTransfer.getData("text/plain");
      if (!kind) return;
      const p = flow.screenToFlowPosition({ x: e.clientX, y: e.clientY });
      addAt(kind, [Math.round(p.x), Math.round(p.y)]);
    },
    [flow, addAt],
  );
  const onDragOver = useCallback((e) => {
    e.preventDefault();
    e.dataTransfer.dropEffect = "move";
  }, []);
  const addAtCentre = useCallback(
    (kind) => {
      const box = rootRef.current.querySelector(".amp-canvas").getBoundingClientRect();
      const p = flow.screenToFlowPosition({ x: box.x + box.width / 2, y: box.y + box.height / 2 });
      addAt(kind, [Math.round(p.x), Math.round(p.y)]);
    },
    [flow, addAt],
  );
  const deleteSelection = useCallback(() => {
    const gone = nodes.filter((n) => n.selected).map((n) => n.id);
    const cut = edges.filter((e) => e.selected && !gone.includes(e.target)).map((e) => [e.target, e.targetHandle]);
    if (gone.length || cut.length) send({ type: "delete", nodes: gone, edges: cut });
  }, [nodes, edges, send]);
  const onKeyDown = useCallback(
    (e) => {
      const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(e.target.tagName);
      if (typing) return;
      if (e.key === "Delete" || e.key === "Backspace") {
        e.preventDefault();
        deleteSelection();
      } else if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "z") {
        e.preventDefault();
        send({ type: e.shiftKey ? "redo" : "undo" });
      } else if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "y") {
        e.preventDefault();
        send({ type: "redo" });
      }
    },
    [deleteSelection, send],
  );

  const selectedIds = nodes.filter((n) => n.selected).map((n) => n.id);
  const selected = selectedIds.length === 1 && view ? view.nodes.find((n) => n.id === selectedIds[0]) : null;
  const entry = selected ? palette.find((p) => p.kind === selected.kind) : null;
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
      onKeyDown={onKeyDown}
      style={{ height: `${height}px` }}
      data-nodes={view ? view.nodes.length : 0}
      data-edges={view ? view.edges.length : 0}
      data-problems={view ? view.n_problems : 0}
      data-revision={view ? view.revision : 0}
      data-graph={view ? view.name : ""}
      data-collapsed-cells={collapsed.size}
      data-shown-nodes={shown.nodes.length}
    >
      <div className="amp-toolbar">
        <button data-action="undo" disabled={!view || !view.can_undo} onClick={() => send({ type: "undo" })} title="undo (Ctrl+Z)">↶ undo</button>
        <button data-action="redo" disabled={!view || !view.can_redo} onClick={() => send({ type: "redo" })} title="redo (Ctrl+Shift+Z)">↷ redo</button>
        <button data-action="layout" onClick={() => send({ type: "auto_layout" })}>auto-layout</button>
        <span className="amp-sep" />
        <label>
          colour by{" "}
          <select data-action="colour-by" value={colourBy} onChange={(e) => setColourBy(e.target.value)}>
            <option value="group">op group</option>
            <option value="worker">worker</option>
          </select>
        </label>
        <label>
          workers{" "}
          <input className="amp-workers" data-action="workers" type="number" min="1" value={workers} onChange={(e) => send({ type: "set_workers", workers: e.target.value })} />
        </label>
        {cellNames.length > 0 && (
          <button
            data-action="collapse-cells"
            title="compound cells (LSTM, GRU, Tree-LSTM) as one box each, or as their IR nodes; double-click one to toggle it"
            onClick={() => {
              setCollapsed(collapsed.size ? new Set() : new Set(cellNames));
              requestAnimationFrame(() => flow.fitView({ padding: 0.1 }));
            }}
          >
            {collapsed.size ? "expand cells" : "collapse cells"}
          </button>
        )}
        <button data-action="auto-place" onClick={() => { setColourBy("worker"); send({ type: "auto_place" }); }}>auto-place</button>
        <span className="amp-sep" />
        <select data-action="model" value={zooChoice} onChange={(e) => setZooChoice(e.target.value)}>
          {zoo.map((z) => (
            <option key={z} value={z}>{z}</option>
          ))}
        </select>
        <button data-action="load" onClick={() => send({ type: "load_model", model: zooChoice })}>load</button>
        <button data-action="export-json" onClick={() => model.send({ type: "export", format: "json" })}>JSON</button>
        <button data-action="export-python" onClick={() => model.send({ type: "export", format: "python" })}>Python</button>
        <span className="amp-sep" />
        <button data-action="train" className="amp-train" onClick={() => model.send({ type: "train" })}>▶ Train</button>
        <span className="amp-status" data-status>{runStatus}</span>
        <span className={`amp-problems ${view && view.n_problems ? "amp-bad" : "amp-good"}`}>
          {view && view.n_problems ? `${view.n_problems} problem(s)` : "valid"}
        </span>
      </div>
      <div className="amp-main">
        <Palette palette={palette} onAdd={addAtCentre} />
        <div className="amp-canvas" onDrop={onDrop} onDragOver={onDragOver}>
          <ReactFlow
            nodes={shown.nodes}
            edges={shown.edges}
            nodeTypes={nodeTypes}
            onNodesChange={onNodesChange}
            onEdgesChange={onEdgesChange}
            onConnect={onConnect}
            onNodeDragStart={onNodeDragStart}
            onNodeDrag={onNodeDrag}
            onNodeDragStop={onNodeDragStop}
            autoPanOnNodeDrag={hoverLane === null}
            onNodeDoubleClick={onNodeDoubleClick}
            zoomOnDoubleClick={false}
            deleteKeyCode={null}
            minZoom={0.05}
            fitView
            proOptions={{ hideAttribution: true }}
          >
            <Background gap={16} />
            <MiniMap pannable zoomable nodeColor={minimapColour} />
            <Controls showInteractive={false} />
            <PerfProbe pending={pendingPerf} tick={perfTick} rootRef={rootRef} model={model} />
          </ReactFlow>
          {general.length > 0 && (
            <ul className="amp-general-errors">
              {general.map((m, i) => (
                <li key={i}>{m}</li>
              ))}
            </ul>
          )}
          {shownNotice && (
            <div className={`amp-notice amp-notice-${shownNotice.level}`} onClick={() => setShownNotice(null)} data-seq={shownNotice.seq}>
              {shownNotice.text}
            </div>
          )}
          {showExport && <ExportDialog exported={showExport} onClose={() => setShowExport(null)} />}
        </div>
        {placement && view && view.lanes && (
          <Lanes lanes={view.lanes} hoverLane={hoverLane} onPin={(names, worker) => send({ type: "pin", nodes: names, worker })} />
        )}
        <Inspector node={selected} entry={entry} workers={workers} send={send} />
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
