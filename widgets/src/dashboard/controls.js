// The dashboard's toolbar. Live: the run's state, pause/resume/stop, Save checkpoint, and the max_active_keys,
// min_update_frequency and max_bundle sliders, each a request to Python that the run answers (the values shown come back
// from the run's status, never from the slider). Replay: play and the time slider. Both: follow the
// newest time, message arrows, fit, and export of the trace.

import { html } from "./dom.js";
import { formatTime } from "./axes.js";

const PLAY_SECONDS = 12; // a replay played from start to end takes this long
const CHECKPOINT_BUTTON =
  '<button class="amp-checkpoint" title="run.save: the keys in flight drain, the state is saved, the run goes on">' +
  "Save checkpoint</button>";

export function createControls(dash) {
  const { live, view, send, on } = dash;
  const limits = dash.model.get("controls") || {};
  const runControls = live
    ? html`<span class="amp-group">
        <span class="amp-state" title="run state">…</span>
        <button class="amp-pause" title="take no new forward work; backward work drains">Pause</button>
        <button class="amp-resume">Resume</button>
        <button class="amp-stop" title="admit no more keys; the run ends when the keys in flight complete">Stop</button>
        ${limits.checkpoint ? CHECKPOINT_BUTTON : ""}
        <label title="keys in flight at most">max_active_keys
          <input class="amp-mak" type="range" min="${limits.max_active_keys?.min ?? 1}"
                 max="${limits.max_active_keys?.max ?? 64}" step="1" value="1"><span class="amp-mak-value">–</span></label>
        <label title="gradients each parameterized node holds before it updates (amp mode)">min_update_frequency
          <input class="amp-muf" type="range" min="1" max="${limits.min_update_frequency?.max ?? 1000}" step="1"
                 value="1"><span class="amp-muf-value">–</span></label>
        <label title="messages of different keys waiting at a node that it runs as one call (1: no bundling)">max_bundle
          <input class="amp-bundle" type="range" min="1" max="${limits.max_bundle?.max ?? 64}" step="1"
                 value="1"><span class="amp-bundle-value">–</span></label>
      </span>`
    : html`<span class="amp-group">
        <button class="amp-play">Play</button>
        <label>time <input class="amp-time" type="range" min="0" max="1" step="any" value="1">
          <span class="amp-time-value">–</span></label>
      </span>`;
  const viewControls = html`<span class="amp-group">
      <label title="keep the newest time in view"><input class="amp-follow" type="checkbox" ${live ? "checked" : ""}> follow</label>
      <label title="arrows for messages between workers (when few boxes are in view)"><input class="amp-arrows" type="checkbox"> arrows</label>
      <button class="amp-fit" title="show everything held">Fit</button>
      <button class="amp-export" title="Chrome/Perfetto JSON: written next to the notebook and downloaded">Export trace</button>
    </span>`;
  const el = html`<div class="amp-toolbar"></div>`;
  el.append(runControls, viewControls);
  const $ = (sel) => el.querySelector(sel);
  const sliderBusy = { mak: false, muf: false, bundle: false };
  let play = null;

  // the window shows everything held (after a replay's rows arrived, or Fit)
  function fitAll() {
    const hi = view.fitAll();
    $(".amp-follow").checked = false;
    if (!live) {
      const slider = $(".amp-time");
      slider.min = "0";
      slider.max = String(hi);
      slider.value = String(hi);
      $(".amp-time-value").textContent = formatTime(hi);
    }
  }

  // the user zoomed or panned: no longer following
  function stopFollowing() {
    $(".amp-follow").checked = false;
  }

  // a live run's status, as the feed sends it with every frame
  function applyStatus(status) {
    if (!status) return;
    const root = dash.root;
    root.dataset.state = status.state;
    $(".amp-state").textContent = status.state;
    $(".amp-state").className = `amp-state amp-state-${status.state}`;
    const mak = status.max_active_keys;
    root.dataset.runMaxActiveKeys = String(mak);
    $(".amp-mak-value").textContent = String(mak);
    if (!sliderBusy.mak) $(".amp-mak").value = String(mak);
    const mufs = Object.values(status.min_update_frequency || {});
    const same = mufs.length && mufs.every((m) => m === mufs[0]);
    const mufText = mufs.length === 0 ? "–" : same ? String(mufs[0]) : `${Math.min(...mufs)}–${Math.max(...mufs)}`;
    root.dataset.runMinUpdateFrequency = mufText;
    $(".amp-muf-value").textContent = mufText;
    if (!sliderBusy.muf && mufs.length) $(".amp-muf").value = String(Math.min(...mufs));
    const bundle = status.max_bundle ?? 1;
    root.dataset.runMaxBundle = String(bundle);
    $(".amp-bundle-value").textContent = String(bundle);
    if (!sliderBusy.bundle) $(".amp-bundle").value = String(bundle);
    const ended = status.state === "finished" || status.state === "failed" || status.state === "stopping";
    for (const sel of [".amp-pause", ".amp-resume", ".amp-stop", ".amp-mak", ".amp-muf", ".amp-bundle"]) {
      $(sel).disabled = ended;
    }
    $(".amp-mak").disabled ||= limits.mode === "sync";
    $(".amp-muf").disabled ||= limits.mode !== "amp";
    const checkpoint = $(".amp-checkpoint");
    if (checkpoint) checkpoint.disabled = status.state === "failed" || status.state === "stopping";
    if (status.error && !status.diagnosis) dash.status.showError(status.error); // a diagnosis says it in full
  }

  if (live) {
    on($(".amp-pause"), "click", () => send({ type: "control", action: "pause" }));
    on($(".amp-resume"), "click", () => send({ type: "control", action: "resume" }));
    on($(".amp-stop"), "click", () => send({ type: "control", action: "stop" }));
    if ($(".amp-checkpoint")) on($(".amp-checkpoint"), "click", () => send({ type: "checkpoint" }));
    for (const [cls, action, key] of [
      [".amp-mak", "max_active_keys", "mak"],
      [".amp-muf", "min_update_frequency", "muf"],
      [".amp-bundle", "max_bundle", "bundle"],
    ]) {
      const input = $(cls);
      on(input, "input", () => {
        sliderBusy[key] = true;
        $(`${cls}-value`).textContent = `${input.value}…`;
      });
      on(input, "change", () => {
        sliderBusy[key] = false;
        send({ type: "control", action, value: Number(input.value) });
      });
    }
  } else {
    const slider = $(".amp-time");
    on(slider, "input", () => {
      view.state.cut = Number(slider.value);
      $(".amp-time-value").textContent = formatTime(view.state.cut);
      dash.schedule();
    });
    on($(".amp-play"), "click", () => {
      if (play) {
        cancelAnimationFrame(play.id);
        play = null;
        $(".amp-play").textContent = "Play";
        return;
      }
      const end = view.latest();
      const began = performance.now();
      const from = view.state.cut >= end ? 0 : view.state.cut || 0;
      view.state.follow = true;
      view.state.span = Math.max(end / 8, 1e-6);
      $(".amp-follow").checked = true;
      $(".amp-play").textContent = "Pause";
      const step = () => {
        const t = from + ((performance.now() - began) / 1000 / PLAY_SECONDS) * end;
        view.state.cut = Math.min(end, t);
        slider.value = String(view.state.cut);
        $(".amp-time-value").textContent = formatTime(view.state.cut);
        dash.schedule();
        if (t < end) play = { id: requestAnimationFrame(step) };
        else {
          play = null;
          $(".amp-play").textContent = "Play";
        }
      };
      play = { id: requestAnimationFrame(step) };
    });
  }
  on($(".amp-follow"), "change", () => {
    view.state.follow = $(".amp-follow").checked;
    view.state.span = Math.max(1e-6, view.state.t1 - view.state.t0);
    dash.schedule();
  });
  on($(".amp-arrows"), "change", () => dash.schedule());
  on($(".amp-fit"), "click", () => {
    fitAll();
    dash.schedule();
  });
  on($(".amp-export"), "click", () => send({ type: "export", download: true }));

  return {
    el,
    fitAll,
    stopFollowing,
    applyStatus,
    arrowsOn: () => $(".amp-arrows").checked,
    // how many arrows the Gantt drew (-1: too many boxes in view to try)
    showArrows(count) {
      dash.root.dataset.arrows = String(count);
      $(".amp-arrows").parentElement.title = count < 0 ? "zoom in to see message arrows" : `${count} arrows`;
    },
    dispose() {
      if (play) cancelAnimationFrame(play.id);
    },
  };
}
