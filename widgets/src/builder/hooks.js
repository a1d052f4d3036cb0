// Small React hooks shared by the builder's components.
import { useCallback, useEffect, useState } from "react";

const KEEP_MARGIN = 12; // px between a selected node and the canvas's edge

// The value of a synced trait of the widget's model, re-rendering when Python changes it.
export function useTrait(model, name) {
  const [value, setValue] = useState(() => model.get(name));
  useEffect(() => {
    const update = () => setValue(model.get(name));
    model.on(`change:${name}`, update);
    return () => model.off(`change:${name}`, update);
  }, [model, name]);
  return value;
}

// The inspector opens beside the canvas when a node is clicked, so the canvas narrows: a selected node
// that the narrower canvas hides on the right is brought back into view (the viewport pans left).
export function useKeepSelectedInView(selectedId, rootRef, canvasRef, flow) {
  useEffect(() => {
    if (!selectedId) return;
    const id = requestAnimationFrame(() => {
      const canvas = canvasRef.current;
      const el = rootRef.current && rootRef.current.querySelector(`.react-flow__node[data-id="${CSS.escape(selectedId)}"]`);
      if (!canvas || !el) return;
      const c = canvas.getBoundingClientRect();
      const r = el.getBoundingClientRect();
      const over = r.right - (c.right - KEEP_MARGIN);
      if (over <= 0) return;
      const shift = Math.min(over, Math.max(0, r.left - (c.left + KEEP_MARGIN)));
      const v = flow.getViewport();
      flow.setViewport({ ...v, x: v.x - shift });
    });
    return () => cancelAnimationFrame(id);
  }, [selectedId, rootRef, canvasRef, flow]);
}

const FIT_DRAWN_MAX_FRAMES = 120; // frames to wait for the fitted viewport to reach the page

// The "fit view" button of the canvas's controls. React Flow queues the fit and applies it a frame or more
// later, once every node is measured; until then the viewport is the old one. The returned callback (the
// controls' onFitView, called right after their own fitView) waits for that same queued fit (fitView
// returns one promise for the fits queued together), then for the page to draw its viewport, and only
// then counts it on the root (data-fit-views). What reads the boxes after a fit (a browser test, say)
// waits for the count instead of guessing at frames.
export function useFitViewCount(flow, rootRef) {
  return useCallback(() => {
    flow.fitView().then(() => {
      let frames = 0;
      const drawn = () => {
        const root = rootRef.current;
        if (!root) return;
        const el = root.querySelector(".react-flow__viewport");
        const { x, y, zoom } = flow.getViewport();
        const m = el ? new DOMMatrixReadOnly(getComputedStyle(el).transform) : null;
        const close = (a, b) => Math.abs(a - b) <= 1e-3 * Math.max(1, Math.abs(b));
        if (m && close(m.a, zoom) && close(m.e, x) && close(m.f, y)) {
          root.dataset.fitViews = String(Number(root.dataset.fitViews || 0) + 1);
        } else if (++frames < FIT_DRAWN_MAX_FRAMES) {
          requestAnimationFrame(drawn);
        } else {
          root.dataset.fitViews = String(Number(root.dataset.fitViews || 0) + 1); // drawn or not, say so
        }
      };
      drawn();
    });
  }, [flow, rootRef]);
}
