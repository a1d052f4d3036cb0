// Small React hooks shared by the builder's components.
import { useEffect, useState } from "react";

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
