import { StrictMode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import "@xyflow/react/dist/style.css";
import "./console.css";
import { ConnectionsView } from "./ConnectionsView.jsx";
import { GraphEditor } from "./GraphEditor.jsx";
import { AuditView } from "./AuditView.jsx";

function useHash() {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const changed = () => setHash(window.location.hash);
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return hash;
}

function App() {
  const hash = useHash();
  const bridge = hash.match(/^#\/bridges\/([^/]+)$/);
  if (bridge) return <GraphEditor key={bridge[1]} bridgeId={decodeURIComponent(bridge[1])} />;
  if (hash === "#/audit") return <AuditView />;
  return <ConnectionsView />;
}

createRoot(document.getElementById("root")).render(<StrictMode><App /></StrictMode>);
