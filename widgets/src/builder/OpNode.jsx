// One IR node on the canvas: a header (op, name, error badge, worker) and its ports. Left to right
// (data.direction "LR"), one row per port under the header, inputs on the left, outputs (with their
// inferred width) on the right. Top to bottom ("TB"), inputs along the top edge and outputs along the
// bottom, their names written only where they say something (layout.js: portStrips). Everything drawn
// comes from Python's view.
import { memo } from "react";
import { Handle, Position } from "@xyflow/react";
import { nodeSize, portStrips } from "./layout.js";

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

// The header; top to bottom (`chip`), a compound cell's member names its cell here rather than on a line
// of its own.
function NodeHead({ id, n, colourBy, chip }) {
  return (
    <div className="amp-node-head">
      <span className="amp-node-kind">{n.label}</span>
      <span className="amp-node-name">{id}</span>
      {chip && n.cell && (
        <span className="amp-node-cell amp-cell-chip" title="double-click a node of this cell to collapse the cell into one box">
          {n.cell}
        </span>
      )}
      {n.errors.length > 0 && (
        <span className="amp-badge" data-node={id} title={n.errors.map((e) => e.message).join("\n")}>
          {n.errors.length}
        </span>
      )}
      {colourBy === "worker" && (
        <span className="amp-worker" style={{ background: workerColour(n.worker) }} title={n.pinned ? "pinned" : "placed by the heuristic"}>
          w{n.worker ?? "?"}
        </span>
      )}
    </div>
  );
}

function CellTag({ cell }) {
  if (!cell) return null;
  return (
    <div className="amp-node-cell" title="double-click a node of this cell to collapse the cell into one box">
      cell {cell}
    </div>
  );
}

// Port i of n sits at the middle of the i-th of n equal slots along the box's edge.
const slot = (i, n) => `${((i + 0.5) / n) * 100}%`;

// The port strips and handles of a top-to-bottom box.
function topDownPorts(n, errorsAt) {
  const strips = portStrips(n);
  const ins = n.inputs;
  const outs = n.outputs;
  return {
    top: strips.inputs && (
      <div className="amp-port-strip amp-strip-in">
        {ins.map((p) => (
          <span className="amp-port-slot" key={p}>
            <span className="amp-port-name" data-port={p}>{p}</span>
            <PortError errors={errorsAt(p)} />
          </span>
        ))}
      </div>
    ),
    bottom: strips.outputs && (
      <div className="amp-port-strip amp-strip-out">
        {outs.map((o) => (
          <span className="amp-port-slot" key={o.port}>
            <PortError errors={errorsAt(o.port)} />
            <span className="amp-port-name" data-port={o.port}>
              {o.port}
              <span className="amp-width">{o.width == null ? "" : ` ·${o.width}`}</span>
            </span>
          </span>
        ))}
      </div>
    ),
    handles: (
      <>
        {ins.map((p, i) => (
          <Handle key={`in:${p}`} type="target" position={Position.Top} id={p} className="amp-handle" style={{ left: slot(i, ins.length) }} />
        ))}
        {outs.map((o, i) => (
          <Handle key={`out:${o.port}`} type="source" position={Position.Bottom} id={o.port} className="amp-handle" style={{ left: slot(i, outs.length) }} />
        ))}
      </>
    ),
  };
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
  const attrs = {
    "data-node": id,
    "data-kind": n.kind,
    "data-worker": n.worker ?? "",
    "data-pinned": n.pinned ? "1" : "0",
    "data-errors": n.errors.length,
  };
  const className = `amp-node ${groupClass}${n.errors.length ? " amp-has-errors" : ""}`;
  if (data.direction === "TB") {
    const ports = topDownPorts(n, errorsAt);
    return (
      <div
        className={`${className} amp-node-tb${n.cell ? " amp-in-cell" : ""}`}
        style={{ ...style, ...nodeSize(n, "TB") }}
        title={n.cell ? `cell ${n.cell}: double-click to collapse the cell into one box` : undefined}
        {...attrs}
      >
        {ports.top}
        <NodeHead id={id} n={n} colourBy={data.colourBy} chip />
        {ports.bottom}
        {ports.handles}
      </div>
    );
  }
  return (
    <div className={className} style={style} {...attrs}>
      <NodeHead id={id} n={n} colourBy={data.colourBy} />
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
      <CellTag cell={n.cell} />
    </div>
  );
}

export default memo(OpNode);
