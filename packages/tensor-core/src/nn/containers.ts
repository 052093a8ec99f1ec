import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { Module } from './module.js';

/** Modules applied in order, each to the previous one's output (`torch.nn.Sequential`). */
export class Sequential extends Module<[Tensor], Tensor> {
  private readonly list: Module<[Tensor], Tensor>[];

  constructor(...modules: Module<[Tensor], Tensor>[]) {
    super();
    this.list = modules;
    modules.forEach((m, i) => {
      this.registerModule(String(i), m);
    });
  }

  get length(): number {
    return this.list.length;
  }

  at(index: number): Module<[Tensor], Tensor> {
    const m = this.list.at(index);
    if (m === undefined) throw new ArgumentError('Sequential', `no module at index ${index}`);
    return m;
  }

  /**
   * Each module's output feeds the next; intermediate outputs are freed once consumed (the input
   * is not). Synchronous while every child is; from the first child whose call returns a promise
   * (a sharded unit awaiting its all-gather) on, the rest runs after it settles and `forward`
   * returns a promise: use `callAsync` on a Sequential whose children may be async.
   */
  forward(x: Tensor): Tensor {
    return this.run(x, 0, x) as Tensor;
  }

  private run(x: Tensor, from: number, input: Tensor): Tensor | Promise<Tensor> {
    let current = x;
    for (let i = from; i < this.list.length; i++) {
      const next = this.list[i]!.call(current) as Tensor | Promise<Tensor>;
      if (next instanceof Promise) {
        const previous = current;
        return next.then((value) => {
          if (previous !== input) previous.free();
          return this.run(value, i + 1, input);
        });
      }
      if (current !== input) current.free();
      current = next;
    }
    return current;
  }
}

/** A list of modules registered as `0`, `1`, ... (`torch.nn.ModuleList`); not callable. */
export class ModuleList<M extends Module = Module> extends Module<[], never> {
  private readonly list: M[] = [];

  constructor(modules: Iterable<M> = []) {
    super();
    for (const m of modules) this.push(m);
  }

  push(module: M): this {
    this.registerModule(String(this.list.length), module);
    this.list.push(module);
    return this;
  }

  get length(): number {
    return this.list.length;
  }

  at(index: number): M {
    const m = this.list.at(index);
    if (m === undefined) throw new ArgumentError('ModuleList', `no module at index ${index}`);
    return m;
  }

  [Symbol.iterator](): Iterator<M> {
    return this.list[Symbol.iterator]();
  }

  forward(): never {
    throw new ArgumentError('ModuleList', 'is a container: call its modules');
  }
}

/** Modules by name (`torch.nn.ModuleDict`); not callable. */
export class ModuleDict<M extends Module = Module> extends Module<[], never> {
  private readonly dict = new Map<string, M>();

  constructor(modules: Readonly<Record<string, M>> = {}) {
    super();
    for (const [name, m] of Object.entries(modules)) this.set(name, m);
  }

  set(name: string, module: M): this {
    this.registerModule(name, module);
    this.dict.set(name, module);
    return this;
  }

  get(name: string): M {
    const m = this.dict.get(name);
    if (m === undefined) throw new ArgumentError('ModuleDict', `no module named '${name}'`);
    return m;
  }

  has(name: string): boolean {
    return this.dict.has(name);
  }

  keys(): string[] {
    return [...this.dict.keys()];
  }

  entries(): [string, M][] {
    return [...this.dict.entries()];
  }

  forward(): never {
    throw new ArgumentError('ModuleDict', 'is a container: call its modules');
  }
}
