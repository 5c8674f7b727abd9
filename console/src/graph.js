// The Bridge's graph (docs/bridge.md, "Graph shape") <-> React Flow's nodes and edges, and the
// cycle check the canvas runs while an edge is drawn.

import { MarkerType } from "@xyflow/react";

export const IN = "in:";
export const ARROW = { type: MarkerType.ArrowClosed };
export const OUT = "out:";

export function toFlow(graph) {
  const nodes = graph.nodes.map((n, i) => {
    const { id, kind, position, ...rest } = n;
    return {
      id, type: "bridgeNode",
      position: position || { x: 80 + 240 * (i % 4), y: 60 + 160 * Math.floor(i / 4) },
      data: { kind, inputs: [], outputs: [], ...rest, problems: [] },
    };
  });
  const edges = graph.edges.map((e) => ({
    id: e.id, source: e.from.node, sourceHandle: OUT + e.from.port, target: e.to.node, targetHandle: IN + e.to.port,
    markerEnd: ARROW,
  }));
  return { nodes, edges, pipelines: graph.pipelines || [] };
}

export function fromFlow(nodes, edges, pipelines) {
  return {
    version: 1,
    nodes: nodes.map((n) => {
      const { problems, kind, ...rest } = n.data;
      const node = { id: n.id, kind, ...rest, position: { x: Math.round(n.position.x), y: Math.round(n.position.y) } };
      if (kind !== "tool") { delete node.connectionId; delete node.tool; }
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
