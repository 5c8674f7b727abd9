// The Bridge's graph (docs/bridge.md, "Graph shape") <-> React Flow's nodes and edges, and the
// rules the canvas mirrors while an edge is drawn (no cycle, one edge per input port).

import { MarkerType } from "@xyflow/react";

export const IN = "in:";
export const ARROW = { type: MarkerType.ArrowClosed };
export const OUT = "out:";
const SHOWN_ONLY = ["problems", "warnings"];  // node data the editor adds for display, never saved

export function toFlow(graph) {
  const nodes = (graph.nodes || []).map((n, i) => {
    const { id, kind, position, ...rest } = n;
    return {
      id, type: "bridgeNode",
      position: position || { x: 80 + 240 * (i % 4), y: 60 + 160 * Math.floor(i / 4) },
      data: { kind, inputs: [], outputs: [], ...rest, problems: [] },
    };
  });
  const edges = (graph.edges || []).map((e) => ({
    id: e.id, source: e.from.node, sourceHandle: OUT + e.from.port, target: e.to.node, targetHandle: IN + e.to.port,
    markerEnd: ARROW,
  }));
  return { nodes, edges, pipelines: graph.pipelines || [] };
}

export function fromFlow(nodes, edges, pipelines) {
  return {
    version: 1,
    nodes: nodes.map((n) => {
      const { kind, ...rest } = n.data;
      for (const key of SHOWN_ONLY) delete rest[key];
      const node = { id: n.id, kind, ...rest, position: { x: Math.round(n.position.x), y: Math.round(n.position.y) } };
      if (kind !== "tool") { delete node.connectionId; delete node.tool; delete node.config; }
      if (node.config && Object.keys(node.config).length === 0) delete node.config;
      return node;
    }),
    edges: edges.map((e) => ({
      id: e.id,
      from: { node: e.source, port: (e.sourceHandle || "").slice(OUT.length) },
      to: { node: e.target, port: (e.targetHandle || "").slice(IN.length) },
    })),
    pipelines,
  };
}

/** JSON with sorted keys: two graphs that differ only in key order compare equal. */
export function canon(value) {
  return JSON.stringify(value, (_, v) => (v && typeof v === "object" && !Array.isArray(v)
    ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]])) : v));
}

/** True when an edge source -> target would close a cycle (target already reaches source). */
export function closesCycle(edges, source, target) {
  if (source === target) return true;
  const next = new Map();
  for (const e of edges) next.set(e.source, [...(next.get(e.source) || []), e.target]);
  const seen = new Set();
  const stack = [target];
  while (stack.length) {
    const id = stack.pop();
    if (id === source) return true;
    if (seen.has(id)) continue;
    seen.add(id);
    stack.push(...(next.get(id) || []));
  }
  return false;
}

/** The edge already wired into a node's input port (`handle`: `in:<port>`), if any. */
export function edgeInto(edges, target, handle) {
  return edges.find((e) => e.target === target && e.targetHandle === handle);
}

/** Why an edge may not be drawn (a cycle, a second edge into one input port), or null. */
export function refusal(edges, c) {
  if (closesCycle(edges, c.source, c.target)) return `refused: an edge from ${c.source} to ${c.target} would close a cycle`;
  const taken = edgeInto(edges, c.target, c.targetHandle);
  if (taken) {
    const port = (c.targetHandle || "").slice(IN.length);
    return `refused: input ${c.target}.${port} already has an edge (from ${taken.source}.${(taken.sourceHandle || "").slice(OUT.length)}); an input port takes one`;
  }
  return null;
}

export function freshId(prefix, taken) {
  for (let i = 1; ; i++) if (!taken.has(`${prefix}${i}`)) return `${prefix}${i}`;
}

/** True when both ends of an edge are ports of nodes on the canvas (else React Flow cannot draw it). */
export function drawable(edge, nodes) {
  const source = nodes.find((n) => n.id === edge.source);
  const target = nodes.find((n) => n.id === edge.target);
  return Boolean(source && target && source.data.outputs.includes((edge.sourceHandle || "").slice(OUT.length))
    && target.data.inputs.includes((edge.targetHandle || "").slice(IN.length)));
}

/** A graph read from a file: its shape checked enough to draw it (the server's save checks the rest). */
export function parseGraphFile(text) {
  let graph;
  try { graph = JSON.parse(text); } catch (e) { throw new Error(`not JSON: ${e.message}`); }
  if (!graph || typeof graph !== "object" || !Array.isArray(graph.nodes) || !Array.isArray(graph.edges)) {
    throw new Error("not a graph: expected {\"nodes\": [...], \"edges\": [...], \"pipelines\": [...]}");
  }
  for (const n of graph.nodes) if (!n || typeof n.id !== "string" || typeof n.kind !== "string") throw new Error("not a graph: every node needs an id and a kind");
  for (const e of graph.edges) if (!e?.from?.node || !e?.to?.node) throw new Error("not a graph: every edge needs from.node and to.node");
  return graph;
}
