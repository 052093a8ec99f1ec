import { NodeRequiredError } from '../errors.js';
import type * as NodePlatform from './node.js';

// `#platform` for bundles built with the `browser` condition: the same names as ./node.ts, none
// of which imports a Node module. See [Note: the platform module].

/** Which build of `#platform` this is. */
export const RUNTIME: typeof NodePlatform.RUNTIME = 'browser';

/** Throws: a page has no file system (fetch the bytes and use `decodeSafetensors`). */
export const nodeFs: typeof NodePlatform.nodeFs = async (op) => {
  throw new NodeRequiredError(
    op,
    'a page has no file system; fetch the bytes and call decodeSafetensors / encodeSafetensors instead',
  );
};

/** Throws: pages use `navigator.gpu`, never the Dawn package. */
export const importDawn: typeof NodePlatform.importDawn = async () => {
  throw new NodeRequiredError(
    'webgpu',
    'the webgpu package is Dawn for Node; pages use navigator.gpu',
  );
};

/** No worker threads in a bundle for the web: the CPU matmul runs on one thread there. */
export const importThreads: typeof NodePlatform.importThreads = async () => null;
