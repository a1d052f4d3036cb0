// The side panels: palette (drag an op onto the canvas), inspector (properties of the selected node),
// toolbar, notices and the export dialog. Each sends intents; none changes the graph locally.
import { useEffect, useMemo, useRef, useState } from "react";

const GROUP_TITLES = { io: "inputs & sinks", payload: "payload", "control flow": "control flow", aggregation: "aggregation", loss: "loss", cells: "compound cells" };

export function Palette({ palette, onAdd }) {
  const [filter, setFilter] = useState("");
  const groups = [];
  for (const entry of palette) {
    if (filter && !`${entry.label} ${entry.kind}`.toLowerCase().includes(filter.toLowerCase())) continue;
    let g = groups.find((x) => x.name === entry.group);
    if (!g) groups.push((g = { name: entry.group, entries: [] }));
    g.entries.push(entry);
  }
  return (
    <div className="amp-palette">
      <input className="amp-filter" placeholder="filter ops" value={filter} onChange={(e) => setFilter(e.target.value)} />
      {groups.map((g) => (
        <div key={g.name} className="amp-palette-group">
          <div className="amp-palette-title">{GROUP_TITLES[g.name] || g.name}</div>
          {g.entries.map((entry) => (
            <div
              key={entry.kind}
              className={`amp-palette-item amp-group-${entry.group.replace(/\s+/g, "-")}`}
              data-kind={entry.kind}
              draggable
              title={`${entry.label}: in ${entry.inputs.join(", ") || "-"}; out ${entry.outputs.join(", ") || "-"} (drag onto the canvas, or double-click)`}
              onDragStart={(e) => {
                e.dataTransfer.setData("application/amp-kind", entry.kind);
                e.dataTransfer.setData("text/plain", entry.kind);
                e.dataTransfer.effectAllowed = "move";
              }}
              onDoubleClick={() => onAdd(entry.kind)}
            >
              {entry.label}
            </div>
          ))}
        </div>
      ))}
    </div>
  );
}

// A text field that commits (Enter or leaving it) only when changed; shows Python's value otherwise. Once
// Python has answered a commit (`settled` changes: a new view, or a notice such as a refusal), it shows
// the value in effect, so a refused entry does not stay as if it had been taken.
function Field({ label, value, onCommit, name, title, settled }) {
  const [text, setText] = useState(value);
  const sent = useRef(false);
  useEffect(() => {
    setText(value);
    sent.current = false;
  }, [value]);
  useEffect(() => {
    if (!sent.current) return;
    sent.current = false;
    setText(value);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [settled]);
  const commit = () => {
    if (text === value) return;
    sent.current = true;
    onCommit(text);
  };
  return (
    <label className="amp-field" title={title}>
      <span>{label}</span>
      <input
        data-field={name}
        value={text}
        onChange={(e) => setText(e.target.value)}
        onBlur={commit}
        onKeyDown={(e) => {
          if (e.key === "Enter") commit();
          if (e.key === "Escape") setText(value);
        }}
      />
    </label>
  );
}

const HINTS = {
  expr: "an expression over state fields: t < length, key % 2 == 0, min(a, b) (no calls, attributes or **)",
  updates: "field = expression; ... (None deletes the field), e.g. t = t + 1",
  ints: "comma-separated ints, e.g. 32, 32",
  "names?": "state fields to match on, e.g. key, t (empty: the full state)",
};

// a field's tooltip: its one-line doc (from the op's field declarations), then how to write its type
function fieldTitle(f) {
  const how = HINTS[f.type] || f.type;
  return f.doc ? `${f.doc}\n(${how})` : how;
}

// settled: changes whenever Python answers (Field, above)
export function Inspector({ node, entry, workers, send, settled }) {
  if (!node) return null; // the canvas takes the room; Overlays.jsx says to click a node
  const set = (field) => (value) => send({ type: "set_property", node: node.id, field, value });
  return (
    <div className="amp-inspector" data-node={node.id}>
      <div className="amp-inspector-title">
        {node.label} <code>{node.id}</code>
      </div>
      <Field label="name" name="name" value={node.id} settled={settled} onCommit={set("name")} />
      {(entry ? entry.fields : []).map((f) =>
        f.choices ? (
          <label className="amp-field" key={f.name} title={f.doc}>
            <span>{f.name}</span>
            <select data-field={f.name} value={node.config[f.name]} onChange={(e) => set(f.name)(e.target.value)}>
              {f.choices.map((c) => (
                <option key={String(c)} value={c == null ? "" : c}>
                  {c == null ? "(none)" : c}
                </option>
              ))}
            </select>
          </label>
        ) : (
          <Field key={f.name} label={f.name} name={f.name} value={node.config[f.name] ?? ""} settled={settled} onCommit={set(f.name)} title={fieldTitle(f)} />
        ),
      )}
      <div className="amp-inspector-sub">runtime</div>
      <label className="amp-field">
        <span>worker</span>
        <select data-field="worker" value={node.attrs.worker} onChange={(e) => set("worker")(e.target.value)}>
          <option value="">auto (w{node.worker ?? "?"})</option>
          {Array.from({ length: Math.max(workers, (node.worker ?? 0) + 1) }, (_, i) => (
            <option key={i} value={String(i)}>
              worker {i}
            </option>
          ))}
        </select>
      </label>
      {node.parameterized && (
        <>
          <Field label="min_update_frequency" name="min_update_frequency" value={node.attrs.min_update_frequency} settled={settled} onCommit={set("min_update_frequency")} title="gradients held before an update (empty: the run's value)" />
          <Field label="optimizer" name="optimizer" value={node.attrs.optimizer} settled={settled} onCommit={set("optimizer")} title='a name (sgd, momentum, adam) or JSON {"name": "adam", "lr": 0.002}; empty: the run&apos;s' />
          <Field label="replicas" name="replicas" value={String(node.attrs.replicas)} settled={settled} onCommit={set("replicas")} title="copies behind Cond(key % R) and Phi, averaged at epoch end" />
        </>
      )}
      {node.errors.length > 0 && (
        <ul className="amp-node-errors">
          {node.errors.map((e, i) => (
            <li key={i}>{e.message}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

// The export's text in a dialog over the canvas, with a download link (one object URL per text, revoked
// when the text changes or the dialog closes) and a copy button.
export function ExportDialog({ exported, onClose }) {
  const type = exported.format === "python" ? "text/x-python" : "application/json";
  const href = useMemo(() => URL.createObjectURL(new Blob([exported.text], { type })), [exported.text, type]);
  useEffect(() => () => URL.revokeObjectURL(href), [href]);
  const file = exported.format === "python" ? "graph.py" : "graph.json";
  return (
    <div className="amp-export" data-format={exported.format}>
      <div className="amp-export-head">
        export: {file}
        <a href={href} download={file}>download</a>
        <button onClick={() => navigator.clipboard && navigator.clipboard.writeText(exported.text)}>copy</button>
        <button onClick={onClose}>close</button>
      </div>
      <textarea readOnly value={exported.text} />
    </div>
  );
}
