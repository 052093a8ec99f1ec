/**
 * The typed error hierarchy of webshard. Every error thrown by a webshard package is a
 * `WebshardError`; subclasses carry structured fields so callers can react without parsing
 * messages. `isInstance` checks a `Symbol.for` marker, so it works across two copies of a package.
 */
const marker: unique symbol = Symbol.for('webshard.error') as never;

export class WebshardError extends Error {
  /** The class names from this error's class up to `WebshardError`, for `isInstance`. */
  readonly [marker]: readonly string[];
  /** Stable machine-readable code, e.g. `E_SHAPE`. */
  readonly code: string;

  constructor(message: string, options: { code?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? 'E_WEBSHARD';
    const kinds: string[] = [];
    for (
      let c: unknown = new.target;
      typeof c === 'function' && c !== Error;
      c = Object.getPrototypeOf(c)
    ) {
      kinds.push((c as { name: string }).name);
    }
    this[marker] = kinds;
  }

  /**
   * `instanceof` that also holds across two copies of webshard in one program:
   * `ShapeError.isInstance(e)` is true for any `ShapeError`, whichever copy threw it.
   */
  static isInstance<T extends abstract new (...args: never[]) => WebshardError>(
    this: T,
    error: unknown,
  ): error is InstanceType<T> {
    if (typeof error !== 'object' || error === null || !(marker in error)) return false;
    const kinds = (error as { [marker]: unknown })[marker];
    return Array.isArray(kinds) && kinds.includes(this.name);
  }
}

function shapeText(shapes: readonly (readonly number[])[]): string {
  return shapes.map((s) => `[${s.join(', ')}]`).join(' and ');
}

/** Operands whose shapes don't fit the op. The message starts with the op: `[matmul] ...`. */
export class ShapeError extends WebshardError {
  readonly op: string;
  readonly shapes: readonly (readonly number[])[];
  constructor(op: string, shapes: readonly (readonly number[])[], detail: string) {
    super(`[${op}] ${detail} (shapes ${shapeText(shapes)})`, { code: 'E_SHAPE' });
    this.op = op;
    this.shapes = shapes;
  }
}

/** An operand of a dtype the op does not accept, or operands whose dtypes disagree. */
export class DTypeError extends WebshardError {
  readonly op: string;
  readonly dtypes: readonly string[];
  constructor(op: string, dtypes: readonly string[], detail: string) {
    super(`[${op}] ${detail} (dtypes ${dtypes.join(', ')})`, { code: 'E_DTYPE' });
    this.op = op;
    this.dtypes = dtypes;
  }
}

/** Use of a tensor whose storage was freed (`tensor.free()`, or resharded by FSDP). */
export class FreedTensorError extends WebshardError {
  readonly op: string;
  readonly tensorName: string | undefined;
  constructor(op: string, tensorName?: string) {
    super(
      `[${op}] tensor${tensorName ? ` '${tensorName}'` : ''} was used after its storage was freed`,
      { code: 'E_FREED' },
    );
    this.op = op;
    this.tensorName = tensorName;
  }
}

/**
 * An in-place move (`moveTo_`, `moveTensors_`) of a tensor whose storage is also held by tensors
 * that are not moving with it (a view, a flat buffer, a tensor autograd retained): moving it alone
 * would split what they share. `references` counts every holder of the storage, `moving` those in
 * the move.
 */
export class SharedStorageError extends WebshardError {
  readonly op: string;
  readonly tensorName: string | undefined;
  readonly references: number;
  readonly moving: number;
  constructor(op: string, tensorName: string | undefined, references: number, moving: number) {
    super(
      `[${op}] tensor${tensorName ? ` '${tensorName}'` : ''} shares its storage with ${references - moving} tensor(s) that are not moving (${references} references, ${moving} moving): move all of them together with moveTensors_, or clone it first`,
      { code: 'E_SHARED_STORAGE' },
    );
    this.op = op;
    this.tensorName = tensorName;
    this.references = references;
    this.moving = moving;
  }
}

/** An index outside its range (embedding ids, cross-entropy targets, slices). */
export class IndexError extends WebshardError {
  readonly op: string;
  readonly index: number;
  readonly bound: number;
  constructor(op: string, index: number, bound: number, detail = '') {
    super(`[${op}] index ${index} is out of range [0, ${bound})${detail ? `: ${detail}` : ''}`, {
      code: 'E_INDEX',
    });
    this.op = op;
    this.index = index;
    this.bound = bound;
  }
}

/** An allocation that would pass the backend's memory limit (real or emulated). */
export class OutOfMemoryError extends WebshardError {
  readonly requested: number;
  readonly allocated: number;
  readonly limit: number;
  /** Bytes outside the allocator counted against the limit (external memory), 0 if none. */
  readonly external: number;
  constructor(
    requested: number,
    allocated: number,
    limit: number,
    backend = 'device',
    external = 0,
  ) {
    const beside = external > 0 ? ` (and ${external} bytes of external memory)` : '';
    super(
      `[allocate] ${backend} out of memory: requested ${requested} bytes with ${allocated} allocated${beside} and a limit of ${limit}`,
      { code: 'E_OOM' },
    );
    this.requested = requested;
    this.allocated = allocated;
    this.limit = limit;
    this.external = external;
  }
}

/** No WebGPU adapter could be obtained. `tried` lists what was attempted, in order. */
export class NoAdapterError extends WebshardError {
  readonly tried: readonly string[];
  constructor(tried: readonly string[], hint: string) {
    super(`[webgpu] no WebGPU adapter found; tried: ${tried.join('; ')}. ${hint}`, {
      code: 'E_NO_ADAPTER',
    });
    this.tried = tried;
  }
}

/**
 * An API that needs Node (file io, listening sockets, the Dawn `webgpu` package) was called where
 * there is no Node: in a page, or a bundle built with the `browser` condition. The message names
 * the op and what to do instead.
 */
export class NodeRequiredError extends WebshardError {
  readonly op: string;
  constructor(op: string, detail: string) {
    super(`[${op}] needs Node: ${detail}`, { code: 'E_NODE_REQUIRED' });
    this.op = op;
  }
}

/** Tensors of two different backends given to one op, or a backend-level failure. */
export class BackendError extends WebshardError {
  readonly op: string;
  constructor(op: string, detail: string, options: { cause?: unknown } = {}) {
    super(`[${op}] ${detail}`, { code: 'E_BACKEND', ...options });
    this.op = op;
  }
}

/** An argument that is not valid for the op (a negative size, an unknown option value). */
export class ArgumentError extends WebshardError {
  readonly op: string;
  constructor(op: string, detail: string) {
    super(`[${op}] ${detail}`, { code: 'E_ARGUMENT' });
    this.op = op;
  }
}

/** A state-machine transition that is not allowed (autograd, FSDP, collectives). */
export class StateError extends WebshardError {
  readonly from: string;
  readonly to: string;
  constructor(what: string, from: string, to: string, detail = '') {
    super(`[${what}] cannot go from ${from} to ${to}${detail ? `: ${detail}` : ''}`, {
      code: 'E_STATE',
    });
    this.from = from;
    this.to = to;
  }
}
