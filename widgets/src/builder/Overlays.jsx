// What floats over the canvas: problems that concern no node (bottom left), the last notice from Python
// (a refusal or a message, top centre, gone after 8 s or a click), the export dialog, and while no node is
// selected (the inspector closed), a hint that a click on one opens it. Python clears the notice and the
// export when another graph is loaded, and both close then; the export's text follows the graph's edits.
import { useEffect, useState } from "react";
import { ExportDialog } from "./panels.jsx";

export default function Overlays({ general, notice, exported, hint }) {
  const [shownNotice, setShownNotice] = useState(null);
  const [exportSeq, setExportSeq] = useState(null); // the export whose dialog is open
  useEffect(() => {
    if (!notice || !notice.seq) {
      setShownNotice(null);
      return undefined;
    }
    setShownNotice(notice);
    const timer = setTimeout(() => setShownNotice((cur) => (cur === notice ? null : cur)), 8000);
    return () => clearTimeout(timer);
  }, [notice]);
  const seq = exported && exported.seq ? exported.seq : null;
  useEffect(() => setExportSeq(seq), [seq]); // a new export opens; a cleared one closes
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
      {seq !== null && exportSeq === seq && <ExportDialog exported={exported} onClose={() => setExportSeq(null)} />}
    </>
  );
}
