import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { parseArgs } from './parse-args.js';

const none = {};

describe('parseArgs', () => {
  it('reads both spellings and leaves the script its arguments', () => {
    expect(
      parseArgs(
        [
          '--nproc_per_node=4',
          '--nnodes',
          '2',
          '--node-rank=1',
          '--master-addr',
          '10.0.0.1',
          '--master_port',
          '7000',
          'train.ts',
          '--lr',
          '3',
        ],
        none,
      ),
    ).toEqual({
      nprocPerNode: 4,
      nnodes: 2,
      nodeRank: 1,
      masterAddr: '10.0.0.1',
      masterPort: 7000,
      ranksAs: 'threads',
      script: 'train.ts',
      args: ['--lr', '3'],
    });
    expect(parseArgs(['--help'], none)).toBe('help');
  });

  it('runs threads, on one node or several, and an executable as processes, unless told', () => {
    const ranksAs = (...argv: string[]) => {
      const options = parseArgs([...argv, 's.mjs'], none);
      return options === 'help' ? options : options.ranksAs;
    };
    expect(ranksAs('--nproc-per-node', '2')).toBe('threads');
    expect(ranksAs('--nproc-per-node', '2', '--nnodes', '1')).toBe('threads');
    expect(ranksAs('--nproc-per-node', '2', '--nnodes', '2')).toBe('threads');
    expect(ranksAs('--nproc-per-node', '2', '--no-node')).toBe('processes');
    expect(ranksAs('--nproc-per-node', '2', '--ranks-as', 'processes')).toBe('processes');
    expect(ranksAs('--nproc-per-node', '2', '--ranks_as=threads')).toBe('threads');
    // Tabs cannot join a world of threads: browser ranks make processes the default.
    expect(ranksAs('--nproc-per-node', '2', '--browser-ranks', '1')).toBe('processes');
    expect(ranksAs('--nproc-per-node', '2', '--browser-ranks', '0')).toBe('threads');
    const options = parseArgs(['--nproc-per-node', '2', '--browser_ranks=3', 's.mjs'], none);
    expect(options).toMatchObject({ browserRanks: 3, nprocPerNode: 2 });
    expect(() =>
      parseArgs(['--nproc-per-node', '2', '--browser-ranks', 'x', 's.mjs'], none),
    ).toThrow("[webshard-run] --browser-ranks needs an integer, got 'x'");
  });

  it('rejects bad input with the option named', () => {
    expect(() => parseArgs(['script.mjs'], none)).toThrow(
      new ArgumentError('webshard-run', '--nproc-per-node is required (or PET_NPROC_PER_NODE)'),
    );
    expect(() => parseArgs(['--nproc-per-node', 'x', 's.mjs'], none)).toThrow(
      "[webshard-run] --nproc-per-node needs an integer, got 'x'",
    );
    expect(() => parseArgs(['--bogus', '1', 's.mjs'], none)).toThrow(
      '[webshard-run] unknown option --bogus',
    );
    expect(() => parseArgs(['--nproc-per-node', '2'], none)).toThrow(
      '[webshard-run] no script given',
    );
    expect(() => parseArgs(['--nproc-per-node', '2', '--ranks-as', 'fibers', 's'], none)).toThrow(
      "[webshard-run] --ranks-as must be threads or processes, got 'fibers'",
    );
  });
});

describe('parseArgs in a cluster', () => {
  const slurm = {
    SLURM_PROCID: '1',
    SLURM_NTASKS: '2',
    SLURM_NNODES: '2',
    SLURM_NODEID: '1',
    SLURM_LOCALID: '0',
    SLURM_JOB_NODELIST: 'gpu[07-08,11],cpu1',
  };
  const pet = {
    WORLD_SIZE: '2',
    RANK: '1',
    PET_NNODES: '2',
    PET_NODE_RANK: '1',
    PET_NPROC_PER_NODE: '4',
    PET_MASTER_ADDR: 'train-0.train',
    PET_MASTER_PORT: '23456',
  };
  const parsed = (argv: string[], env: Record<string, string>) => {
    const options = parseArgs([...argv, 'train.mjs'], env);
    if (options === 'help') throw new Error('help');
    const { script: _script, args: _args, ...rest } = options;
    return rest;
  };

  it("reads Slurm's node, node count and first host (one launcher per node)", () => {
    expect(parsed(['--nproc-per-node', '2'], slurm)).toEqual({
      nprocPerNode: 2,
      nnodes: 2,
      nodeRank: 1,
      masterAddr: 'gpu07',
      ranksAs: 'threads',
    });
    const oneNode = { ...slurm, SLURM_NTASKS: '1', SLURM_NNODES: '1', SLURM_NODEID: '0' };
    expect(parsed(['--nproc-per-node', '2'], oneNode).ranksAs).toBe('threads');
  });

  it("reads a Kubernetes training operator's PET_ variables", () => {
    expect(parsed([], pet)).toEqual({
      nprocPerNode: 4,
      nnodes: 2,
      nodeRank: 1,
      masterAddr: 'train-0.train',
      masterPort: 23456,
      ranksAs: 'threads',
    });
    expect(parsed([], { ...pet, PET_NNODES: '2:2' }).nnodes).toBe(2);
  });

  it('takes flags over torchrun variables over PET_ over Slurm, setting by setting', () => {
    const both = { ...slurm, ...pet };
    expect(parsed([], both)).toMatchObject({ nnodes: 2, nodeRank: 1, masterAddr: 'train-0.train' });
    const torchrun = { ...both, MASTER_ADDR: '10.0.0.9', MASTER_PORT: '4000' };
    expect(parsed([], torchrun)).toMatchObject({ masterAddr: '10.0.0.9', masterPort: 4000 });
    expect(
      parsed(
        [
          '--nproc-per-node',
          '1',
          '--nnodes',
          '3',
          '--node-rank',
          '2',
          '--master-addr',
          'h',
          '--master-port',
          '5',
        ],
        torchrun,
      ),
    ).toEqual({
      nprocPerNode: 1,
      nnodes: 3,
      nodeRank: 2,
      masterAddr: 'h',
      masterPort: 5,
      ranksAs: 'threads',
    });
    // A value that a flag replaces is never read, so a bad one does not matter.
    expect(
      parsed(['--nproc-per-node', '2'], { ...pet, PET_NPROC_PER_NODE: 'auto' }).nprocPerNode,
    ).toBe(2);
  });

  it('refuses bad cluster values with the variable named', () => {
    const bad = (env: Record<string, string>, message: string) =>
      expect(() => parseArgs(['--nproc-per-node', '2', 's.mjs'], env)).toThrow(
        new ArgumentError('webshard-run', message),
      );
    bad(
      { PET_NNODES: '1:4' },
      "PET_NNODES='1:4' is an elastic range; webshard-run needs a fixed node count",
    );
    bad({ PET_NNODES: '0' }, "PET_NNODES must be at least 1, got '0'");
    bad({ PET_NODE_RANK: '-1' }, "PET_NODE_RANK must be a non-negative integer, got '-1'");
    bad({ PET_MASTER_PORT: '70000' }, "PET_MASTER_PORT must be a port (0-65535), got '70000'");
    bad({ SLURM_NODEID: 'one' }, "SLURM_NODEID must be a non-negative integer, got 'one'");
    bad(
      { SLURM_JOB_NODELIST: 'node[04-01]' },
      "SLURM_JOB_NODELIST='node[04-01]' is not a Slurm hostlist: range 04-01 runs backwards",
    );
    bad(
      { SLURM_NODEID: '0', SLURM_NTASKS: '8', SLURM_NNODES: '2' },
      'Slurm started 8 tasks on 2 nodes: run one webshard-run per node (srun --ntasks-per-node=1), or pass --node-rank',
    );
    expect(() => parseArgs(['s.mjs'], { PET_NPROC_PER_NODE: 'auto' })).toThrow(
      "[webshard-run] PET_NPROC_PER_NODE must be a non-negative integer, got 'auto'",
    );
  });
});
