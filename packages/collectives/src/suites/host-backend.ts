import type { Backend, HostArray } from '@webshard/tensor-core';
import type { KernelTensor, RawStorage } from '@webshard/tensor-core/backend';
import { bytesPerElement } from '@webshard/tensor-core';
import { hostArrayFor } from '@webshard/tensor-core/backend';

/**
 * A test double of a tensor-core backend with only the memory and transfer half of the contract
 * (allocate, release, read, write): enough for collectives on tensors, kept in ArrayBuffers.
 * `kind: 'cpu'` exercises the in-place path (the collective views the storage directly);
 * `kind: 'webgpu'` exercises the read / write-back path a device backend takes. Kernels are not
 * part of it and throw if called.
 */
export function createHostBackend(kind: 'cpu' | 'webgpu'): Backend {
  const memory = {
    kind,
    capabilities: { shaderF16: false, maxStorageBytes: 2 ** 31 },
    description: `host test backend (${kind})`,
    allocate(byteSize: number): RawStorage {
      return { buffer: new ArrayBuffer(byteSize), byteSize };
    },
    release(): void {},
    write(dst: KernelTensor, data: HostArray, done?: () => void): void {
      const element = bytesPerElement(dst.dtype);
      const target = new Uint8Array(
        dst.storage.buffer as ArrayBuffer,
        dst.offset * element,
        data.byteLength,
      );
      target.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      done?.();
    },
    async read(src: KernelTensor, into?: HostArray): Promise<HostArray> {
      let size = 1;
      for (const d of src.shape) size *= d;
      const out = into ?? hostArrayFor(src.dtype, size);
      const element = bytesPerElement(src.dtype);
      new Uint8Array(out.buffer, out.byteOffset).set(
        new Uint8Array(src.storage.buffer as ArrayBuffer, src.offset * element, size * element),
      );
      return out;
    },
  };
  return new Proxy(memory, {
    get(target, property) {
      if (property in target) return target[property as keyof typeof target];
      if (property === 'then') return undefined;
      return () => {
        throw new Error(`host test backend has no kernel '${String(property)}'`);
      };
    },
  }) as unknown as Backend;
}
