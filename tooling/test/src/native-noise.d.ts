/** Whole stderr lines that Dawn, Vulkan drivers and Mesa print on their own. */
export const NATIVE_WEBGPU_NOISE: readonly RegExp[];
/** True for a line that only Dawn, a Vulkan driver or Mesa prints. */
export function isNativeWebGpuNoise(line: string): boolean;
/** `text` without its noise lines. */
export function withoutNativeWebGpuNoise(text: string): string;
/** Makes `stream.write` drop the noise lines of every chunk written to it. Idempotent. */
export function filterNativeWebGpuNoise(stream: NodeJS.WritableStream): void;
