// The builder's toolbar: undo/redo, layout (by the graph's shape, or a direction asked for), colour by op
// group or worker, the worker count, cells collapsed or expanded, auto-place, the model zoo (its menu shows
// the zoo model loaded; Train on one brings its data and settings), exports, Train and the run's status,
// and whether the graph validates. Every button sends an intent to Python
// except the view-only ones (colour by, cells).
import { useEffect, useState } from "react";

const LAYOUTS = [
  ["auto", "by shape"],
  ["TB", "top to bottom"],
  ["LR", "left to right"],
];

export default function Toolbar({ model, view, send, zoo, runStatus, colourBy, setColourBy, cellNames, cellsCollapsed, onToggleCells }) {
  const [zooChoice, setZooChoice] = useState("rnn");
  const loaded = view ? view.zoo_model : null; // the zoo model the graph was loaded as (kept through edits)
  useEffect(() => {
    if (loaded) setZooChoice(loaded);
  }, [loaded]);
  const described = zoo.find((z) => z.name === zooChoice);
  const [layoutChoice, setLayoutChoice] = useState("auto");
  const relayout = (choice) => send({ type: "auto_layout", direction: choice === "auto" ? null : choice });
  const workers = view ? view.workers : 2;
  return (
    <div className="amp-toolbar">
      <button data-action="undo" disabled={!view || !view.can_undo} onClick={() => send({ type: "undo" })} title="undo (Ctrl+Z)">↶ undo</button>
      <button data-action="redo" disabled={!view || !view.can_redo} onClick={() => send({ type: "redo" })} title="redo (Ctrl+Shift+Z)">↷ redo</button>
      <button data-action="layout" onClick={() => relayout(layoutChoice)} title="lay the graph out again">auto-layout</button>
      <select
        data-action="direction"
        value={layoutChoice}
        title="layout direction: by the graph's shape (long chains top to bottom), or as chosen"
        onChange={(e) => {
          setLayoutChoice(e.target.value);
          relayout(e.target.value);
        }}
      >
        {LAYOUTS.map(([value, text]) => (
          <option key={value} value={value}>{text}</option>
        ))}
      </select>
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
          onClick={onToggleCells}
        >
          {cellsCollapsed ? "expand cells" : "collapse cells"}
        </button>
      )}
      <button
        data-action="auto-place"
        onClick={() => {
          setColourBy("worker");
          send({ type: "auto_place" });
        }}
      >
        auto-place
      </button>
      <span className="amp-sep" />
      <select data-action="model" value={zooChoice} title={described ? described.description : "the model zoo"} onChange={(e) => setZooChoice(e.target.value)}>
        {zoo.map((z) => (
          <option key={z.name} value={z.name} title={z.description}>
            {z.name}
          </option>
        ))}
      </select>
      <button data-action="load" title="load this zoo model (Train then brings its data and recommended settings)" onClick={() => send({ type: "load_model", model: zooChoice })}>
        load
      </button>
      <button data-action="export-json" onClick={() => model.send({ type: "export", format: "json" })}>JSON</button>
      <button data-action="export-python" onClick={() => model.send({ type: "export", format: "python" })}>Python</button>
      <span className="amp-sep" />
      <button
        data-action="train"
        data-zoo-model={loaded || ""}
        className="amp-train"
        title={
          loaded
            ? `train in the background on builder.train_data, or without it on the zoo ${loaded}'s small dataset, with its recommended settings (builder.train_options over them)`
            : "train in the background on builder.train_data (set it in Python), with builder.train_options"
        }
        onClick={() => model.send({ type: "train" })}
      >
        ▶ Train
      </button>
      <span className="amp-status" data-status>{runStatus}</span>
      <span className={`amp-problems ${view && view.n_problems ? "amp-bad" : "amp-good"}`}>
        {view && view.n_problems ? `${view.n_problems} problem(s)` : "valid"}
      </span>
    </div>
  );
}
