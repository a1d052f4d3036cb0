// The time window every time axis shows (the Gantt and the charts under it): following the newest time
// (live, or a replay while it plays) or a window the user zoomed and panned to, and for replays the time
// `cut` after which nothing is drawn yet.

export function createTimeView(dash) {
  const state = { follow: dash.live, span: dash.model.get("window_s"), t0: 0, t1: dash.model.get("window_s"), cut: undefined };

  const latest = () => Math.max(0, ...dash.runs.map((r) => r.tMax));
  const earliest = () => {
    let lo = Infinity;
    for (const r of dash.runs) {
      const { start } = r.events.cols;
      r.events.forEach((i) => {
        if (start[i] < lo) lo = start[i];
      });
    }
    return Number.isFinite(lo) ? lo : 0;
  };

  // {t0, t1, cut} to draw now
  function current() {
    if (state.follow) {
      const end = !dash.live && state.cut !== undefined ? state.cut : latest();
      // a young run is shown whole, with room to grow, until it is older than the span followed
      const span = Math.min(state.span, Math.max(end * 1.25, 0.02));
      state.t1 = Math.max(end, span);
      state.t0 = state.t1 - span;
    }
    return { t0: state.t0, t1: state.t1, cut: dash.live ? undefined : state.cut };
  }

  // everything held, no longer following; returns the end time (a replay's slider goes there)
  function fitAll() {
    const lo = earliest();
    const hi = Math.max(latest(), lo + 1e-6);
    state.follow = false;
    state.t0 = lo;
    state.t1 = hi;
    if (!dash.live) state.cut = hi;
    return hi;
  }

  // a window chosen by the user (zoom, pan): stops following
  function show(t0, t1) {
    state.follow = false;
    state.t0 = t0;
    state.t1 = t1;
    state.span = t1 - t0;
  }

  return { state, current, fitAll, show, latest, earliest };
}
