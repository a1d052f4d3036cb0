// One IR node on the canvas: a header (op, name, error badge, worker) and one row per port, inputs on the
// left, outputs (with their inferred width) on the right. Everything drawn comes from Python's view.
import { memo } from "react";
import { Handle, Position } from "@xyflow/react";

export const WORKER_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

export function workerColour(worker) {
  return worker == null ? "#999" : WORKER_COLOURS[worker % WORKER_COLOURS.length];
}

function PortError({ errors }) {
  if (errors.length === 0) return null;
  return (
    <span className="amp-port-error" title={errors.map((e) => e.message).join("\n")}>
      !
    </span>
  );
}

function OpNode({ id, data }) {
  const n = data.node;
  const rows = Math.max(n.inputs.length, n.outputs.length);
  const errorsAt = (port) => n.errors.filter((e) => e.port === port);
  const style = {};
  if (data.colourBy === "worker") {
    style.borderColor = workerColour(n.worker);
    style.background = `${workerColour(n.worker)}${n.pinned ? "40" : "1c"}`;
  }
  const groupClass = `amp-group-${n.group.replace(/\s+/g, "-")}`;
  return (
    <div
      className={`amp-node ${groupClass}${n.errors.length ? " amp-has-errors" : ""}`}
      style={style}
      data-node={id}
      data-kind={n.kind}
      data-worker={n.worker ?? ""}
      data-pinned={n.pinned ? "1" : "0"}
      data-errors={n.errors.length}
    >
      <div className="amp-node-head">
        <span className="amp-node-kind">{n.label}</span>
        <span className="amp-node-name">{id}</span>
        {n.errors.length > 0 && (
          <span className="amp-badge" data-node={id} title={n.errors.map((e) => e.message).join("\n")}>
            {n.errors.length}
          </span>
        )}
        {data.colourBy === "worker" && (
          <span className="amp-worker" style={{ background: workerColour(n.worker) }} title={n.pinned ? "pinned" : "placed by the heuristic"}>
            w{n.worker ?? "?"}
          </span>
        )}
      </div>
      <div className="amp-node-ports">
        {Array.from({ length: rows }, (_, i) => {
          const inp = n.inputs[i];
          const out = n.outputs[i];
          return (
            <div className="amp-port-row" key={i}>
              <div className="amp-port amp-port-in">
                {inp !== undefined && (
                  <>
                    <Handle type="target" position={Position.Left} id={inp} className="amp-handle" />
                    <span className="amp-port-name" data-port={inp}>{inp}</span>
                    <PortError errors={errorsAt(inp)} />
                  </>
                )}
              </div>
              <div className="amp-port amp-port-out">
                {out !== undefined && (
                  <>
                    <PortError errors={errorsAt(out.port)} />
                    <span className="amp-port-name" data-port={out.port}>
                      {out.port}
                      <span className="amp-width">{out.width == null ? "" : ` ·${out.width}`}</span>
                    </span>
                    <Handle type="source" position={Position.Right} id={out.port} className="amp-handle" />
                  </>
                )}
              </div>
            </div>
          );
        })}
      </div>
      {n.cell && (
        <div className="amp-node-cell" title="double-click a node of this cell to collapse the cell into one box">
          cell {n.cell}
        </div>
      )}
    </div>
  );
}

export default memo(OpNode);
