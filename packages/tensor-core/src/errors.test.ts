import { describe, expect, it } from 'vitest';
import {
  DTypeError,
  FreedTensorError,
  IndexError,
  ShapeError,
  StateError,
  WebshardError,
} from './errors.js';

describe('error hierarchy', () => {
  it('names the op and the shapes in ShapeError', () => {
    const error = new ShapeError(
      'matmul',
      [
        [2, 3],
        [4, 5],
      ],
      'inner dimensions differ: 3 and 4',
    );
    expect(error.message).toBe(
      '[matmul] inner dimensions differ: 3 and 4 (shapes [2, 3] and [4, 5])',
    );
    expect(error).toMatchObject({
      op: 'matmul',
      shapes: [
        [2, 3],
        [4, 5],
      ],
      code: 'E_SHAPE',
      name: 'ShapeError',
    });
  });

  it('isInstance checks the class through the marker, not the prototype chain', () => {
    const error = new IndexError('embedding', 70, 64);
    expect(error.message).toBe('[embedding] index 70 is out of range [0, 64)');
    expect(IndexError.isInstance(error)).toBe(true);
    expect(WebshardError.isInstance(error)).toBe(true);
    expect(ShapeError.isInstance(error)).toBe(false);
    // An error from another copy of the package: same marker, different classes.
    const foreign = Object.assign(new Error('x'), {
      [Symbol.for('webshard.error')]: ['IndexError', 'WebshardError'],
    });
    expect(IndexError.isInstance(foreign)).toBe(true);
    expect(DTypeError.isInstance(foreign)).toBe(false);
    expect(WebshardError.isInstance(new Error('plain'))).toBe(false);
  });

  it('formats the other errors with their structured fields', () => {
    expect(new FreedTensorError('add', 'fc1.weight').message).toBe(
      "[add] tensor 'fc1.weight' was used after its storage was freed",
    );
    expect(new DTypeError('add', ['f32', 'i32'], 'operands differ').message).toBe(
      '[add] operands differ (dtypes f32, i32)',
    );
    expect(new StateError('fsdp', 'IDLE', 'BACKWARD_POST', 'no forward ran').message).toBe(
      '[fsdp] cannot go from IDLE to BACKWARD_POST: no forward ran',
    );
  });
});
