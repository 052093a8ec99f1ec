/** The model and run a playground session trains (the page's controls set them). */
export interface SessionSettings {
  /** Transformer blocks, heads and width of the GPT. */
  nLayer: number;
  nHead: number;
  nEmbd: number;
  /** Tokens of context, and windows a step. */
  blockSize: number;
  batchSize: number;
  /** Peak learning rate (cosine to a tenth over `steps`, after `warmupSteps`). */
  lr: number;
  steps: number;
  warmupSteps: number;
  seed: number;
  /** `auto` measures both where WebGPU exists ([Note: the playground's backend]). */
  backend: 'auto' | 'webgpu' | 'cpu';
}

/** The model sizes the page offers: the trainer's default (`pnpm train`) and two larger ones. */
export const MODEL_SIZES = {
  tiny: { nLayer: 2, nHead: 4, nEmbd: 64, blockSize: 32 },
  small: { nLayer: 4, nHead: 4, nEmbd: 128, blockSize: 64 },
  medium: { nLayer: 6, nHead: 6, nEmbd: 192, blockSize: 128 },
} as const;
export type ModelSize = keyof typeof MODEL_SIZES;

/** The trainer's defaults (`pnpm train`), with the tiny model. */
export const DEFAULT_SETTINGS: SessionSettings = {
  ...MODEL_SIZES.tiny,
  batchSize: 16,
  lr: 3e-3,
  steps: 1000,
  warmupSteps: 20,
  seed: 1337,
  backend: 'auto',
};
