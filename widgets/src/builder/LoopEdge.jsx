// A loop back-edge (Python marks the edges that close a loop at its Phi): drawn dashed, in the control-flow
// colour, with an arrowhead, routed around the side of the nodes the loop passes (its lane, from fit.js)
// instead of straight back through them, and labelled "loop" with the width it carries.
import { memo } from "react";
import { BaseEdge } from "@xyflow/react";
import { LOOP_STUB, loopPoints, roundedPath } from "./fit.js";

function LoopEdge({ sourceX, sourceY, targetX, targetY, data, markerEnd, selected, label }) {
  const direction = data && data.direction === "TB" ? "TB" : "LR";
  const fallback = direction === "TB" ? Math.max(sourceX, targetX) + 60 : Math.max(sourceY, targetY) + 60;
  const lane = data && Number.isFinite(data.lane) ? data.lane : fallback;
  const points = loopPoints(sourceX, sourceY, targetX, targetY, lane, direction);
  const [labelX, labelY] = direction === "TB" ? [lane, (sourceY + targetY) / 2] : [(sourceX + targetX) / 2, lane];
  return (
    <BaseEdge
      path={roundedPath(points, LOOP_STUB / 2)}
      markerEnd={markerEnd}
      className={selected ? "amp-loop-path amp-loop-selected" : "amp-loop-path"}
      label={label ? `loop ${label}` : "loop"}
      labelX={labelX}
      labelY={labelY}
      labelBgPadding={[3, 2]}
      labelBgBorderRadius={3}
    />
  );
}

export default memo(LoopEdge);
