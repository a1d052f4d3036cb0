// Lives inside React Flow. For a fresh view (useGraphView's `pending`): sets the canvas height and the
// viewport that fit.js computes for the graph (readable labels; the whole graph when it fits; from the
// boxes' sizes as layout.js gives them, so it need not wait for React Flow to measure them) and, once
// React Flow has measured every node, reports how long layout + first render took: on the root element
// (data-layout-ms, data-render-ms; data-initial-zoom, data-fits and data-fit-width, the canvas width it
// fitted, for the fit) and to Python (`perf`). `fittedWidth` keeps the builder's width at the last fit.
import { useEffect } from "react";
import { useNodesInitialized, useReactFlow } from "@xyflow/react";
import { fitViewport } from "./fit.js";

export default function InitialView({ pending, tick, drawn, rootRef, canvasRef, fittedWidth, model, fixedHeight, canvasHeight, setCanvasHeight, setOverflowing }) {
  const initialized = useNodesInitialized();
  const flow = useReactFlow();
  useEffect(() => {
    const p = pending.current;
    if (!p || p.fitted) return;
    p.fitted = true;
    const root = rootRef.current;
    if (!p.noFit && canvasRef.current) {
      const keep = fixedHeight || (p.keepHeight ? canvasHeight : 0);
      const { bounds, start } = drawn.current;
      const fit = fitViewport(bounds, canvasRef.current.clientWidth, { fixedHeight: keep, start });
      setCanvasHeight(fit.height);
      flow.setViewport({ x: fit.x, y: fit.y, zoom: fit.zoom });
      setOverflowing(!fit.fits); // after setViewport, whose move-end saw the canvas at its old height
      if (root) {
        fittedWidth.current = root.clientWidth;
        root.dataset.initialZoom = fit.zoom.toFixed(3);
        root.dataset.fits = fit.fits ? "1" : "0";
        root.dataset.fitWidth = String(canvasRef.current.clientWidth);
      }
    }
    // drawn is a ref read when the fit is due; the canvas height is read then too
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [tick]);
  useEffect(() => {
    const p = pending.current;
    if (!initialized || !p || !p.fitted) return;
    pending.current = null;
    const root = rootRef.current;
    if (!p.perf) return;
    requestAnimationFrame(() => {
      const total = performance.now() - p.t0;
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
