/** A registered hook. `remove()` unregisters it; removing twice is harmless. */
export interface RemovableHandle {
  remove(): void;
  /** Whether the hook is still registered. */
  readonly active: boolean;
}

/**
 * An ordered list of hooks. Hooks fire in registration order; removing one while the list is being
 * fired does not disturb the iteration (the list is copied before firing).
 */
export class HookList<F> {
  private readonly hooks = new Map<number, F>();
  private nextId = 0;

  add(fn: F): RemovableHandle {
    const id = this.nextId++;
    this.hooks.set(id, fn);
    const hooks = this.hooks;
    return {
      remove: () => {
        hooks.delete(id);
      },
      get active() {
        return hooks.has(id);
      },
    };
  }

  get size(): number {
    return this.hooks.size;
  }

  snapshot(): F[] {
    return [...this.hooks.values()];
  }
}
