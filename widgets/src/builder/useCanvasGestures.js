// What the user does on the canvas, turned into intents for Python: drag nodes (a "move", or a "pin" when
// dropped on a worker lane of the placement view), connect ports, drop or double-click palette items,
// delete the selection, undo/redo keys, double-click cells to collapse or expand them. Only positions of
// a drag in progress and the selection change locally.
import { useCallback, useRef } from "react";
import { applyEdgeChanges, applyNodeChanges } from "@xyflow/react";
import { laneAt, laneWorker } from "./Lanes.jsx";

export function useCanvasGestures({ flow, send, nodes, setNodes, edges, setEdges, placement, setHoverLane, toggleCell, anchor, rootRef, setCellSizes }) {
  const nodesRef = useRef([]);
  nodesRef.current = nodes;
  const dragStart = useRef(null); // where the dragged nodes and the view were, to go back there after a pin

  // changes to a collapsed cell's box move its member nodes; its measured size is kept beside them
  const onNodesChange = useCallback(
    (changes) => {
      const sized = changes.filter((c) => c.type === "dimensions" && c.dimensions && c.id.startsWith("cell:"));
      if (sized.length) setCellSizes((old) => Object.assign({ ...old }, ...sized.map((c) => ({ [c.id]: c.dimensions }))));
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
      });
    },
    [setNodes, setCellSizes],
  );
  const onEdgesChange = useCallback(
    (changes) => setEdges((es) => applyEdgeChanges(changes.filter((c) => c.type !== "remove"), es)),
    [setEdges],
  );
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
    [placement, setHoverLane],
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
    [send, irNodes, placement, flow, setNodes, setHoverLane],
  );
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
    [send, anchor],
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
    [flow, addAt, rootRef],
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

  return {
    canvas: { onNodesChange, onEdgesChange, onConnect, onNodeDragStart, onNodeDrag, onNodeDragStop, onNodeDoubleClick },
    onDrop,
    onDragOver,
    addAtCentre,
    onKeyDown,
  };
}
