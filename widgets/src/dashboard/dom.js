// Small DOM and number helpers shared by the dashboard's panels.

// One element from an HTML template literal (values are inserted as text of the template).
export function html(strings, ...values) {
  const t = document.createElement("template");
  t.innerHTML = strings.reduce((acc, s, i) => acc + s + (i < values.length ? values[i] : ""), "");
  return t.content.firstElementChild;
}

// A canvas `w` x `h` CSS px at the screen's pixel density; its 2D context, scaled to CSS px.
export function sizeCanvas(canvas, w, h) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : 0;
}
