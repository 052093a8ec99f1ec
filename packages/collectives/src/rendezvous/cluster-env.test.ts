import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { resolveRendezvousOptions } from './env.js';
import { expandSlurmHostlist } from './slurm-hostlist.js';

describe('expandSlurmHostlist', () => {
  it('expands ranges and lists, keeps zero padding and combines bracket groups', () => {
    expect(expandSlurmHostlist('node[01-04,07]')).toEqual([
      'node01',
      'node02',
      'node03',
      'node04',
      'node07',
    ]);
    expect(expandSlurmHostlist('a1,gpu[8-10],b-ib')).toEqual([
      'a1',
      'gpu8',
      'gpu9',
      'gpu10',
      'b-ib',
    ]);
    expect(expandSlurmHostlist('r[1-2]n[098-099]-ib')).toEqual([
      'r1n098-ib',
      'r1n099-ib',
      'r2n098-ib',
      'r2n099-ib',
    ]);
    expect(expandSlurmHostlist('login')).toEqual(['login']);
  });

  it('refuses malformed lists naming the variable', () => {
    const bad = (list: string, why: string) =>
      expect(() => expandSlurmHostlist(list)).toThrow(
        new ArgumentError(
          'rendezvous',
          `SLURM_JOB_NODELIST='${list}' is not a Slurm hostlist: ${why}`,
        ),
      );
    bad('node[01-04', "'[' without ']'");
    bad('node01]', "']' without '[' at 6");
    bad('node[1-[2]]', 'nested brackets');
    bad('node[a-b]', "'a-b' in [a-b] is not a number or a range a-b");
    bad('node[]', "'' in [] is not a number or a range a-b");
    bad('node[5-1]', 'range 5-1 runs backwards');
    bad('a,,b', 'an empty host name');
    bad('', 'an empty host name');
    bad('[1-2]', "'[1-2]' has no host name before its brackets");
    bad('n[0-99999999]', 'range 0-99999999 is over 65536 hosts');
    bad('n[0-999]m[0-999]', 'over 65536 hosts');
    bad('a b', 'it contains whitespace');
  });
});

describe('resolveRendezvousOptions in a cluster', () => {
  const slurm = {
    SLURM_PROCID: '5',
    SLURM_NTASKS: '8',
    SLURM_LOCALID: '1',
    SLURM_NODEID: '2',
    SLURM_JOB_NODELIST: 'node[03-06]',
  };

  it("a task that srun started is a rank: Slurm's rank, size, local rank and first host", () => {
    expect(resolveRendezvousOptions({}, slurm)).toEqual({
      rank: 5,
      worldSize: 8,
      localRank: 1,
      masterAddr: 'node03',
      masterPort: 29500,
      token: '',
      timeoutMs: 300_000,
    });
  });

  it("a pod of a Kubernetes PyTorchJob: RANK and WORLD_SIZE, the operator's master", () => {
    const pod = {
      RANK: '1',
      WORLD_SIZE: '2',
      PET_MASTER_ADDR: 'job-0.job',
      PET_MASTER_PORT: '23456',
    };
    expect(resolveRendezvousOptions({}, pod)).toMatchObject({
      rank: 1,
      worldSize: 2,
      localRank: 1,
      masterAddr: 'job-0.job',
      masterPort: 23456,
    });
  });

  it('takes options over torchrun variables over PET_ and Slurm, setting by setting', () => {
    const env = {
      ...slurm,
      PET_MASTER_ADDR: 'pet-master',
      PET_MASTER_PORT: '1111',
      RANK: '3',
      MASTER_PORT: '2222',
    };
    // RANK and MASTER_PORT beat Slurm and PET_; WORLD_SIZE, LOCAL_RANK come from Slurm; the
    // master's address from PET_ over Slurm's node list.
    expect(resolveRendezvousOptions({}, env)).toMatchObject({
      rank: 3,
      worldSize: 8,
      localRank: 1,
      masterAddr: 'pet-master',
      masterPort: 2222,
    });
    expect(
      resolveRendezvousOptions(
        { rank: 0, worldSize: 2, localRank: 0, masterAddr: 'x', masterPort: 9 },
        env,
      ),
    ).toMatchObject({ rank: 0, worldSize: 2, localRank: 0, masterAddr: 'x', masterPort: 9 });
  });

  it('refuses bad values with the variable named, never guessing', () => {
    const bad = (env: Record<string, string>, message: string) =>
      expect(() => resolveRendezvousOptions({}, env)).toThrow(
        new ArgumentError('rendezvous', message),
      );
    bad({ SLURM_NTASKS: '4' }, 'rank is required (option, RANK or SLURM_PROCID)');
    bad({ SLURM_PROCID: '0' }, 'worldSize is required (option, WORLD_SIZE or SLURM_NTASKS)');
    bad(
      { ...slurm, SLURM_PROCID: '1.5' },
      "SLURM_PROCID must be a non-negative integer, got '1.5'",
    );
    bad({ ...slurm, SLURM_NTASKS: '0' }, "SLURM_NTASKS must be at least 1, got '0'");
    bad(
      { ...slurm, SLURM_PROCID: '8' },
      'SLURM_PROCID=8 is outside [0, 8) (SLURM_NTASKS=8): ranks run from 0 to the world size - 1',
    );
    bad(
      { ...slurm, SLURM_JOB_NODELIST: 'node[03-' },
      "SLURM_JOB_NODELIST='node[03-' is not a Slurm hostlist: '[' without ']'",
    );
    bad(
      { ...slurm, PET_MASTER_PORT: 'http' },
      "PET_MASTER_PORT must be a non-negative integer, got 'http'",
    );
  });
});
