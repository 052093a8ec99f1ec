import { describe, expect, it } from 'vitest';
import { NodeRequiredError } from '../errors.js';
import { importDawn, nodeFs, RUNTIME } from './browser.js';

describe('#platform in a browser bundle', () => {
  it('file io is a NodeRequiredError naming the op and the browser alternative', async () => {
    expect(RUNTIME).toBe('browser');
    const error = await nodeFs('loadSafetensors').catch((e: unknown) => e);
    expect(NodeRequiredError.isInstance(error)).toBe(true);
    expect((error as NodeRequiredError).op).toBe('loadSafetensors');
    expect((error as Error).message).toBe(
      '[loadSafetensors] needs Node: a page has no file system; fetch the bytes and call decodeSafetensors / encodeSafetensors instead',
    );
  });

  it('the Dawn package is never loaded', async () => {
    const error = await importDawn().catch((e: unknown) => e);
    expect(NodeRequiredError.isInstance(error)).toBe(true);
  });
});
