// The backward engine's scheduling state (see [Note: the backward engine and its ordering
// guarantees] in ./engine.ts): which nodes are ready, in which order, and how many edges each waits for.
import type { GradNode } from './node.js';

/** Max-heap of ready nodes by sequence number; ties (AccumulateGrad) in readiness order. */
export class ReadyQueue {
  private readonly heap: { node: GradNode; order: number }[] = [];
  private order = 0;

  get size(): number {
    return this.heap.length;
  }

  private before(
    a: { node: GradNode; order: number },
    b: { node: GradNode; order: number },
  ): boolean {
    if (a.node.sequenceNr !== b.node.sequenceNr) return a.node.sequenceNr > b.node.sequenceNr;
    return a.order < b.order;
  }

  push(node: GradNode): void {
    const h = this.heap;
    h.push({ node, order: this.order++ });
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  pop(): GradNode {
    const h = this.heap;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let best = i;
        if (l < h.length && this.before(h[l]!, h[best]!)) best = l;
        if (r < h.length && this.before(h[r]!, h[best]!)) best = r;
        if (best === i) break;
        [h[i], h[best]] = [h[best]!, h[i]!];
        i = best;
      }
    }
    return top.node;
  }
}

/** How many edges reach each node of the graph under `root`: a node is ready when all have fired. */
export function dependencies(root: GradNode): Map<GradNode, number> {
  const deps = new Map<GradNode, number>();
  const seen = new Set<GradNode>([root]);
  const stack: GradNode[] = [root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    for (const edge of node.next) {
      if (edge === null) continue;
      deps.set(edge.node, (deps.get(edge.node) ?? 0) + 1);
      if (!seen.has(edge.node)) {
        seen.add(edge.node);
        stack.push(edge.node);
      }
    }
  }
  return deps;
}
