// tree.js — a stored conversation as a tree of messages. GET
// /api/conversations/ID gives every message of every branch with its
// parent_id and the conversation's current_leaf_id; the page shows the path
// from the root to that leaf, and a message with siblings (the other answers
// to one question, the other edits of one message) gets < n/m > arrows.
// A server that stores no parents gives one linear path: each message is
// the child of the one before it.

const key = (parent) => (parent === null || parent === undefined ? 0 : parent);

export class Tree {
  constructor(conv) {
    this.id = conv.id;
    this.title = conv.title;
    this.byId = new Map();
    this.kids = new Map();   // parent id (0 = root) -> [child ids], oldest first
    const msgs = conv.messages || [];
    this.branching = msgs.length > 0 && 'parent_id' in msgs[0];
    let prev = null;
    for (const m of msgs) {
      const n = Object.assign({}, m);
      if (!this.branching) n.parent_id = prev;
      prev = n.id;
      this.byId.set(n.id, n);
    }
    for (const n of this.byId.values()) {
      const k = key(n.parent_id);
      if (!this.kids.has(k)) this.kids.set(k, []);
      this.kids.get(k).push(n.id);
    }
    for (const list of this.kids.values()) list.sort((a, b) => a - b);   // ids are creation order
    const leaf = conv.current_leaf_id;
    this.leaf = leaf && this.byId.has(leaf) ? leaf : this.latestLeaf(0);
  }

  get(id) { return this.byId.get(id); }

  children(id) { return this.kids.get(key(id)) || []; }

  /** The messages from the root down to leaf (default: the current leaf). */
  path(leaf = this.leaf) {
    const out = [];
    for (let n = this.byId.get(leaf); n; n = this.byId.get(n.parent_id)) out.push(n);
    return out.reverse();
  }

  /** [index, count] of a message among its parent's children. */
  siblingPos(id) {
    const n = this.byId.get(id);
    const sib = this.children(n ? n.parent_id : 0);
    return [sib.indexOf(id), sib.length];
  }

  sibling(id, step) {
    const n = this.byId.get(id);
    const sib = this.children(n.parent_id);
    const i = sib.indexOf(id) + step;
    return i >= 0 && i < sib.length ? sib[i] : null;
  }

  /** The newest leaf under id (0: the whole tree): where a switch to that branch lands. */
  latestLeaf(id) {
    let best = null;
    const stack = id ? [id] : [...this.children(0)];
    while (stack.length) {
      const x = stack.pop();
      const ch = this.children(x);
      if (ch.length) { stack.push(...ch); continue; }
      if (best === null || x > best) best = x;
    }
    return best;
  }
}
