// The node palette: search the node kinds and the tools of the bridge's connections; Enter or a
// click adds the node (a tool's node comes with its connection, tool and ports).
import { useEffect, useState } from "react";

const KINDS = [
  { kind: "input", text: "input — the pipeline's arguments" },
  { kind: "tool", text: "tool — call one tool" },
  { kind: "merge", text: "merge — join values into one object" },
  { kind: "output", text: "output — the pipeline's result" },
];

export function Palette({ connections, toolsOf, onAdd }) {
  const [query, setQuery] = useState("");
  const [open, setOpen] = useState(false);
  const [tools, setTools] = useState([]);
  useEffect(() => {
    if (!open) return undefined;
    let live = true;
    Promise.all(connections.map((c) => toolsOf(c).then((ts) => ts.map((t) => ({ connection: c, tool: t })), () => [])))
      .then((lists) => live && setTools(lists.flat()));
    return () => { live = false; };
  }, [open, connections, toolsOf]);
  const q = query.trim().toLowerCase();
  const items = [
    ...KINDS.map((k) => ({ key: k.kind, text: k.text, add: () => onAdd(k.kind) })),
    ...tools.map(({ connection, tool }) => ({
      key: `${connection}/${tool.name}`, text: `${connection} / ${tool.name}${tool.description ? ` — ${tool.description}` : ""}`,
      add: () => onAdd("tool", { connectionId: connection, tool: tool.name, inputs: Object.keys(tool.inputSchema?.properties || {}) }),
    })),
  ].filter((i) => !q || i.text.toLowerCase().includes(q));
  const pick = (item) => { item.add(); setQuery(""); setOpen(false); };
  return (
    <div className="palette">
      <input name="palette" type="search" value={query} placeholder="Add a node: search kinds and tools" aria-label="add a node"
        onFocus={() => setOpen(true)} onChange={(e) => { setQuery(e.target.value); setOpen(true); }}
        onKeyDown={(e) => {
          if (e.key === "Enter" && items.length) { e.preventDefault(); pick(items[0]); }
          if (e.key === "Escape") setOpen(false);
        }} />
      {open && (
        <ul className="palette-list" role="listbox" aria-label="nodes">
          {items.slice(0, 30).map((i) => <li key={i.key}><button type="button" role="option" aria-selected="false" onClick={() => pick(i)}>{i.text}</button></li>)}
          {items.length === 0 && <li className="hint">nothing matches</li>}
          <li><button type="button" onClick={() => setOpen(false)}>Close</button></li>
        </ul>
      )}
    </div>
  );
}
