import { StrictMode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import "@xyflow/react/dist/style.css";
import "./console.css";
import { ConnectionsView } from "./ConnectionsView.jsx";
import { GraphEditor } from "./GraphEditor.jsx";
import { AuditView } from "./AuditView.jsx";
import { mayLeave } from "./guard.js";

function useHash() {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const changed = (e) => {
      if (!mayLeave()) {  // unsaved edits, and the user stays: the address goes back to the editor's
        window.history.replaceState(null, "", e.oldURL);
        return;
      }
      setHash(window.location.hash);
    };
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return hash;
}

function App() {
  const hash = useHash();
  const bridge = hash.match(/^#\/bridges\/([^/?]+)(?:\?owner=([^&]*))?$/);
  if (bridge) {
    const owner = bridge[2] === undefined ? undefined : decodeURIComponent(bridge[2]);
    return <GraphEditor key={hash} bridgeId={decodeURIComponent(bridge[1])} owner={owner} />;
  }
  if (hash === "#/audit") return <AuditView />;
  return <ConnectionsView />;
}

createRoot(document.getElementById("root")).render(<StrictMode><App /></StrictMode>);
