import type { Module } from '@webshard/tensor-core';
import type { ResolvedOptions } from './api.js';

/**
 * A unit's settings on one line (fairscale's `extra_repr`): the world size, `flattenParameters`
 * and `mixedPrecision`; with `verbose` also the rank, whether it is the root (known after the first
 * forward) and every other option.
 */
export function extraRepr(options: ResolvedOptions, isRoot: boolean): string {
  const worldSize = options.group.size;
  const rank = options.group.rank;
  const base = [
    `worldSize=${worldSize}`,
    `flattenParameters=${options.flattenParameters}`,
    `mixedPrecision=${options.mixedPrecision}`,
  ];
  if (!options.verbose) return base.join(', ');
  return [
    `rank=${rank}`,
    `isRoot=${isRoot}`,
    ...base,
    `reshardAfterForward=${options.reshardAfterForward}`,
    `disableReshardOnRoot=${options.disableReshardOnRoot}`,
    `computeDtype=${options.computeDtype}`,
    `bufferDtype=${options.bufferDtype}`,
    `fp32ReduceScatter=${options.fp32ReduceScatter}`,
    `computeBackend=${options.computeBackend?.kind ?? "the parameters'"}`,
    `moveParamsToCpu=${options.moveParamsToCpu}`,
    `moveGradsToCpu=${options.moveGradsToCpu}`,
    `bucketCapMb=${options.bucketCapMb}`,
    `forceInputToFp32=${options.forceInputToFp32}`,
    `clearAutocastCache=${options.clearAutocastCache}`,
    `limitAllGathers=${options.limitAllGathers}`,
    `gradientPredivideFactor=${options.gradientPredivideFactor}`,
  ].join(', ');
}

/**
 * The module tree under `module`, one module a line, two spaces of indent a level, as PyTorch
 * prints a module: `(name): TypeName`, with `extra(m)` in parentheses where it gives one.
 */
export function moduleTree(module: Module, extra: (m: Module) => string | null): string {
  const lines: string[] = [];
  const visit = (m: Module, label: string, depth: number): void => {
    const more = extra(m);
    lines.push(`${'  '.repeat(depth)}${label}${m.typeName}${more === null ? '' : `(${more})`}`);
    for (const [name, child] of m.namedChildren()) visit(child, `(${name}): `, depth + 1);
  };
  visit(module, '', 0);
  return lines.join('\n');
}
