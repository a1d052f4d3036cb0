// What floats over the canvas: problems that concern no node (bottom left), the last notice from Python
// (a refusal or a message, top centre, gone after 8 s or a click), the export dialog, and while no node is
// selected (the inspector closed), a hint that a click on one opens it.
import { useEffect, useState } from "react";
import { ExportDialog } from "./panels.jsx";

export default function Overlays({ general, notice, exported, hint }) {
  const [shownNotice, setShownNotice] = useState(null);
  const [showExport, setShowExport] = useState(null);
  useEffect(() => {
    if (notice && notice.seq) {
      setShownNotice(notice);
      const timer = setTimeout(() => setShownNotice((cur) => (cur === notice ? null : cur)), 8000);
      return () => clearTimeout(timer);
    }
  }, [notice]);
  useEffect(() => {
    if (exported && exported.seq) setShowExport(exported);
  }, [exported]);
  return (
    <>
      {hint && <div className="amp-canvas-hint">{hint}</div>}
      {general.length > 0 && (
        <ul className="amp-general-errors">
          {general.map((m, i) => (
            <li key={i}>{m}</li>
          ))}
        </ul>
      )}
      {shownNotice && (
        <div className={`amp-notice amp-notice-${shownNotice.level}`} onClick={() => setShownNotice(null)} data-seq={shownNotice.seq}>
          {shownNotice.text}
        </div>
      )}
      {showExport && <ExportDialog exported={showExport} onClose={() => setShowExport(null)} />}
    </>
  );
}
