import type { Backend } from '../backend/backend.js';
import { HookList, type RemovableHandle } from '../autograd/hooks.js';
import { markParameter } from '../autograd/node.js';
import { ArgumentError } from '../errors.js';
import { zeroGrads } from '../optim/optimizer.js';
import { keep } from '../scope.js';
import type { Tensor } from '../tensor.js';
import { loadStateDictInto, type StateDictInput } from './state-dict.js';

/**
 * Runs before `forward` with the module and its arguments; may return replacement arguments (an
 * array) and may be async (FSDP awaits an all-gather here).
 */
export type ForwardPreHook = (
  module: Module,
  args: unknown[],
) => unknown[] | undefined | Promise<unknown[] | undefined>;

/** Runs after `forward` with the module, its arguments and output; may return a replacement output. */
export type ForwardHook = (module: Module, args: unknown[], output: unknown) => unknown;

export type {
  DTypeMismatch,
  FreedKey,
  ShapeMismatch,
  StateDictInput,
  StateDictProblems,
} from './state-dict.js';
export { StateDictError } from './state-dict.js';

function isPromise(value: unknown): value is Promise<unknown> {
  return value instanceof Promise;
}

/** `fn(value)`, after `value` resolves when it is a promise. Keeps synchronous chains synchronous. */
function then<T, R>(value: T | Promise<T>, fn: (v: T) => R | Promise<R>): R | Promise<R> {
  return isPromise(value) ? value.then(fn) : fn(value);
}

function validName(kind: string, name: string): void {
  if (name === '' || name.includes('.')) {
    throw new ArgumentError(`register${kind}`, `name '${name}' must be non-empty and without '.'`);
  }
}

/**
 * The base of every layer and model, like `torch.nn.Module`.
 *
 * [Note: modules]
 * A module holds named parameters, buffers and child modules, registered explicitly
 * (`registerParameter`, `registerBuffer`, `registerModule`); names compose with dots into
 * PyTorch's naming (`transformer.h.0.attn.c_attn.weight`), so state dicts match PyTorch's.
 * Subclasses implement `forward`; callers use `call`, which runs the forward hooks around it.
 * `call` stays synchronous when the forward and all hooks are, and returns a promise as soon as
 * one of them does (a sharded wrapper's async pre-hook): a model with async hooks inside it must
 * itself await `callAsync` on its children. Parameters are marked for autograd to save by
 * reference (see [Note: saved tensors]), so a wrapper may free and rebuild their storage.
 * Layers expose their parameters as accessors over the registry, so `lmHead.weight = wte.weight`
 * ties them as in PyTorch; a tied tensor is yielded once by `namedParameters` and under every key by
 * `stateDict`.
 *
 * [Note: tensor names]
 * Error messages name tensors by `tensor.name` (a parameter freed at backward:
 * `[matmul backward] tensor 'transformer.h.0.attn.c_attn.weight' was used after its storage was
 * freed`), so a module names what it registers. `registerParameter` / `registerBuffer` set an
 * unnamed tensor's name to its own name (`weight`); `registerModule` prefixes the child's tensors
 * whose name is still their path inside the child (`weight` -> `c_attn.weight`), and since models
 * are built bottom-up (children constructed, then registered), every tensor ends up with its full
 * path from the outermost module, PyTorch's `named_parameters()` name. A tensor named by hand, or
 * already named elsewhere (a tied weight keeps its first name), is left alone. A tensor registered
 * into a child after that child was registered keeps its short name: `nameTensors()` renames
 * everything from the root.
 */
export abstract class Module<Args extends unknown[] = unknown[], Out = unknown> {
  /** Training mode (dropout active); set with `train()` / `eval()`. */
  training = true;
  private readonly params = new Map<string, Tensor | null>();
  private readonly buffersByName = new Map<string, Tensor | null>();
  private readonly nonPersistent = new Set<string>();
  private readonly childModules = new Map<string, Module | null>();
  private readonly forwardPreHooks = new HookList<ForwardPreHook>();
  private readonly forwardHooks = new HookList<ForwardHook>();

  /** The computation. Call the module with `call` (or `callAsync`) so hooks run. */
  abstract forward(...args: Args): Out;

  /** The class name, for messages. */
  get typeName(): string {
    return this.constructor.name;
  }

  /** Run forward with the forward pre-hooks before and the forward hooks after. */
  call(...args: Args): Out {
    const pre = this.forwardPreHooks.snapshot();
    const post = this.forwardHooks.snapshot();
    if (pre.length === 0 && post.length === 0) return this.forward(...args);
    let current: unknown[] | Promise<unknown[]> = args;
    for (const hook of pre) {
      current = then(current, (a) => then(hook(this, a), (r) => r ?? a));
    }
    return then(current, (a) => {
      let output: unknown = this.forward(...(a as Args));
      for (const hook of post) {
        output = then(output, (o) => then(hook(this, a, o), (r) => (r === undefined ? o : r)));
      }
      return output;
    }) as Out;
  }

  /** `call`, always as a promise: use it on children that may have async hooks (FSDP units). */
  async callAsync(...args: Args): Promise<Awaited<Out>> {
    return (await this.call(...args)) as Awaited<Out>;
  }

  /** Hook run before every forward; may replace the arguments; may be async. */
  registerForwardPreHook(hook: ForwardPreHook): RemovableHandle {
    return this.forwardPreHooks.add(hook);
  }

  /** Hook run after every forward; may replace the output; may be async. */
  registerForwardHook(hook: ForwardHook): RemovableHandle {
    return this.forwardHooks.add(hook);
  }

  /**
   * Register (or replace, or with null remove) a parameter. Its `requiresGrad` is set to
   * `options.requiresGrad` (default true, as `nn.Parameter`); its name is set if it has none.
   */
  registerParameter<T extends Tensor | null>(
    name: string,
    tensor: T,
    options: { requiresGrad?: boolean } = {},
  ): T {
    validName('Parameter', name);
    if (this.buffersByName.has(name) || this.childModules.has(name)) {
      throw new ArgumentError('registerParameter', `'${name}' is already a buffer or module`);
    }
    if (tensor !== null) {
      if (!tensor.isLeaf) {
        throw new ArgumentError(
          'registerParameter',
          `'${name}' must be a leaf tensor (detach it first)`,
        );
      }
      tensor.requiresGrad = options.requiresGrad ?? true;
      tensor.name ??= name;
      markParameter(keep(tensor));
    }
    this.params.set(name, tensor);
    return tensor;
  }

  /** Register a buffer (state that is not a parameter); `persistent: false` keeps it out of stateDict. */
  registerBuffer<T extends Tensor | null>(
    name: string,
    tensor: T,
    options: { persistent?: boolean } = {},
  ): T {
    validName('Buffer', name);
    if (this.params.has(name) || this.childModules.has(name)) {
      throw new ArgumentError('registerBuffer', `'${name}' is already a parameter or module`);
    }
    if (tensor !== null) {
      tensor.name ??= name;
      keep(tensor);
    }
    this.buffersByName.set(name, tensor);
    if (options.persistent === false) this.nonPersistent.add(name);
    else this.nonPersistent.delete(name);
    return tensor;
  }

  /**
   * Register (or replace) a child module under `name`. Returns the child. The child's parameters
   * and buffers that are named by their path inside the child get `name.` in front, so that names
   * are full dotted paths (see [Note: tensor names]).
   */
  registerModule<M extends Module | null>(name: string, module: M): M {
    validName('Module', name);
    if (this.params.has(name) || this.buffersByName.has(name)) {
      throw new ArgumentError('registerModule', `'${name}' is already a parameter or buffer`);
    }
    this.childModules.set(name, module);
    if (module !== null) {
      for (const [path, t] of [...module.namedParameters(), ...module.namedBuffers()]) {
        if (t.name === path) t.name = `${name}.${path}`;
      }
    }
    return module;
  }

  /** This module's own parameter `name`; throws if there is none. */
  getParameter(name: string): Tensor {
    const t = this.params.get(name);
    if (t === undefined || t === null) {
      throw new ArgumentError('getParameter', `${this.typeName} has no parameter '${name}'`);
    }
    return t;
  }

  /** This module's own parameter `name`, or null (registered as null or absent). */
  optionalParameter(name: string): Tensor | null {
    return this.params.get(name) ?? null;
  }

  /** This module's own buffer `name`; throws if there is none. */
  getBuffer(name: string): Tensor {
    const t = this.buffersByName.get(name);
    if (t === undefined || t === null) {
      throw new ArgumentError('getBuffer', `${this.typeName} has no buffer '${name}'`);
    }
    return t;
  }

  /** The direct children with their names. */
  namedChildren(): [string, Module][] {
    const out: [string, Module][] = [];
    for (const [name, m] of this.childModules) if (m !== null) out.push([name, m]);
    return out;
  }

  children(): Module[] {
    return this.namedChildren().map(([, m]) => m);
  }

  /** This module and every descendant, pre-order, each once (`''` is this module). */
  namedModules(prefix = ''): [string, Module][] {
    const out: [string, Module][] = [];
    const seen = new Set<Module>();
    const visit = (module: Module, name: string): void => {
      if (seen.has(module)) return;
      seen.add(module);
      out.push([name, module]);
      for (const [childName, child] of module.namedChildren()) {
        visit(child, name === '' ? childName : `${name}.${childName}`);
      }
    };
    visit(this, prefix);
    return out;
  }

  modules(): Module[] {
    return this.namedModules().map(([, m]) => m);
  }

  /**
   * Every parameter with its full name, each tensor once (a tied parameter under its first name),
   * like PyTorch's `named_parameters()`. `recurse: false` lists only this module's own.
   */
  namedParameters(
    options: { recurse?: boolean; removeDuplicate?: boolean } = {},
  ): [string, Tensor][] {
    return this.namedTensors('params', options);
  }

  parameters(options: { recurse?: boolean } = {}): Tensor[] {
    return this.namedParameters(options).map(([, t]) => t);
  }

  /** Every buffer with its full name, each tensor once. */
  namedBuffers(options: { recurse?: boolean; removeDuplicate?: boolean } = {}): [string, Tensor][] {
    return this.namedTensors('buffersByName', options);
  }

  buffers(options: { recurse?: boolean } = {}): Tensor[] {
    return this.namedBuffers(options).map(([, t]) => t);
  }

  private namedTensors(
    kind: 'params' | 'buffersByName',
    options: { recurse?: boolean; removeDuplicate?: boolean },
  ): [string, Tensor][] {
    const out: [string, Tensor][] = [];
    const seen = new Set<Tensor>();
    const modules: [string, Module][] =
      options.recurse === false ? [['', this]] : this.namedModules();
    for (const [prefix, module] of modules) {
      for (const [name, t] of module[kind]) {
        if (t === null) continue;
        if (options.removeDuplicate !== false) {
          if (seen.has(t)) continue;
          seen.add(t);
        }
        out.push([prefix === '' ? name : `${prefix}.${name}`, t]);
      }
    }
    return out;
  }

  /** Set each parameter's and buffer's `name` to its full dotted name (for error messages). */
  nameTensors(): this {
    for (const [name, t] of this.namedParameters()) t.name = name;
    for (const [name, t] of this.namedBuffers()) t.name = name;
    return this;
  }

  /**
   * Parameters and persistent buffers by full name, like PyTorch's `state_dict()`: this module's
   * parameters, then its buffers, then each child's, recursively; a tied tensor appears under
   * every key. The values are the module's own tensors (not copies): do not free them.
   */
  stateDict(prefix = ''): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    const visit = (module: Module, p: string): void => {
      for (const [name, t] of module.params) if (t !== null) out.set(p + name, t);
      for (const [name, t] of module.buffersByName) {
        if (t !== null && !module.nonPersistent.has(name)) out.set(p + name, t);
      }
      for (const [name, child] of module.childModules) {
        if (child !== null) visit(child, `${p}${name}.`);
      }
    };
    visit(this, prefix);
    return out;
  }

  /**
   * Copy a state dict into this module's tensors (converting dtype and backend as needed), like
   * PyTorch's `load_state_dict`. Shape mismatches, integer/float dtype mismatches and freed tensors
   * (in the dict or in the model) are always an error; with `strict` (default) missing and
   * unexpected keys are too. All problems are reported in one `StateDictError`, and nothing is
   * copied when there is one (see [Note: loadStateDict is all or nothing]).
   */
  async loadStateDict(
    dict: StateDictInput,
    options: { strict?: boolean } = {},
  ): Promise<{ missingKeys: string[]; unexpectedKeys: string[] }> {
    return loadStateDictInto(this.typeName, this.stateDict(), dict, options.strict ?? true);
  }

  /** Set training mode on this module and every descendant. */
  train(mode = true): this {
    for (const m of this.modules()) m.training = mode;
    return this;
  }

  /** Evaluation mode (`train(false)`): dropout off. */
  eval(): this {
    return this.train(false);
  }

  /** Call `fn` on every descendant and then this module (PyTorch's post-order `apply`). */
  apply(fn: (module: Module) => void): this {
    for (const child of this.children()) child.apply(fn);
    fn(this);
    return this;
  }

  /** Clear parameters' gradients: to null (default, freed) or zero-filled. */
  zeroGrad(options: { setToNone?: boolean } = {}): void {
    zeroGrads(this.parameters(), options.setToNone ?? true);
  }

  /**
   * Move every parameter and buffer to `backend` (copies; ties kept). Parameters become new tensor
   * objects on the new backend with the same names and `requiresGrad`, and the old ones are freed:
   * create optimizers after moving.
   */
  async to(backend: Backend): Promise<this> {
    const moved = new Map<Tensor, Tensor>();
    for (const module of this.modules()) {
      for (const t of [...module.params.values(), ...module.buffersByName.values()]) {
        if (t === null || moved.has(t) || t.backend === backend) continue;
        const copy = keep(await t.to(backend));
        copy.name = t.name;
        moved.set(t, copy);
      }
    }
    this.replaceTensors(moved);
    for (const old of moved.keys()) old.free();
    return this;
  }

  /**
   * Replace tensors wherever they are registered, as parameters (keeping `requiresGrad`) or
   * buffers, in this module and its descendants: how `to` and `MixedPrecision` swap tensors while
   * keeping ties.
   */
  replaceTensors(replacements: ReadonlyMap<Tensor, Tensor>): void {
    for (const module of this.modules()) {
      for (const [name, t] of module.params) {
        const next = t === null ? undefined : replacements.get(t);
        if (next !== undefined) {
          next.requiresGrad = t!.requiresGrad;
          markParameter(keep(next));
          module.params.set(name, next);
        }
      }
      for (const [name, t] of module.buffersByName) {
        const next = t === null ? undefined : replacements.get(t);
        if (next !== undefined) module.buffersByName.set(name, keep(next));
      }
    }
  }
}
