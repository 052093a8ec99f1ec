import { type ProcessGroup, receiveStateSlices, sendStateSlices } from '@webshard/collectives';
import { AdamW } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { JoinCatchUp } from './join-catch-up.js';
import { decodeJoinState, encodeJoinState, roundJoinMomentum } from './join-state.js';
import { backwardOn, buildModel, flat } from './test-support/mlp-case.js';
import { closeWorld, createWorld, newSeed, type TestTransport } from './test-support/worlds.js';

// [Note: catching up a join] with [Note: a compressed join] and the sliced transfer of
// @webshard/collectives: two members train on while a newcomer downloads their state.

function bits(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

const H = 2;

describe('a newcomer catching up while the members train on', () => {
  it.each<TestTransport>(['local', 'tcp'])(
    '%s: the members run 3 outer syncs while the download is held; the newcomer then holds their global copy and momentum bit for bit',
    async (transport) => {
      const seed = newSeed(`diloco join catch-up ${transport}`);
      const join = { momentum: 'int8', blockSize: 8 } as const;
      // Two members build a momentum in a world of 2 first.
      const two = await createWorld(transport, 2);
      const models = [buildModel(seed), buildModel(seed), buildModel(seed + 99)];
      const inner = models.map((m) => new AdamW(m.parameters(), { lr: 0.01 }));
      const members = await Promise.all(
        two.map((group, r) =>
          DiLoCo.create(models[r]!.parameters(), inner[r]!, { group, innerSteps: H }),
        ),
      );
      let step = 0;
      const trainMembers = async () => {
        for (let i = 0; i < H; i++, step++) {
          await Promise.all(
            members.map(async (d, r) => {
              await backwardOn(models[r]!, seed, r, step);
              await d.step();
            }),
          );
        }
      };
      await trainMembers();
      await trainMembers();
      // The newcomer is admitted: a world of 3, and a group of its own for the slices.
      const three = await createWorld(transport, 3);
      const slicesGroup = three.map((g) => g.newGroup([0, 1, 2])!) as ProcessGroup[];
      for (const [r, d] of members.entries()) d.regroup(three[r]!);
      const newcomer = await DiLoCo.create(models[2]!.parameters(), inner[2]!, {
        group: three[2]!,
        innerSteps: H,
        broadcast: false,
      });
      const slices = { senders: [0, 1], receivers: [2], chunkBytes: 64 };
      const snapshots = members.map((d) => {
        d.roundMomentum((m) => roundJoinMomentum(m, join));
        return encodeJoinState(d.stateDict(), join);
      });
      let release = () => {};
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      const sending = [
        sendStateSlices(slicesGroup[0]!, snapshots[0]!, slices),
        // The second sender is held until the members have synced 3 times.
        held.then(() => sendStateSlices(slicesGroup[1]!, snapshots[1]!, slices)),
      ];
      let membersSynced = 0;
      let syncedWhenDownloaded = -1;
      const progress: number[] = [];
      const receiving = receiveStateSlices(slicesGroup[2]!, {
        ...slices,
        onProgress: (received) => progress.push(received),
      }).then((entries) => {
        syncedWhenDownloaded = membersSynced;
        return entries;
      });
      const catchUp = new JoinCatchUp(newcomer);
      for (let sync = 0; sync < 3; sync++) {
        await Promise.all([
          trainMembers().then(() => {
            membersSynced += 1;
          }),
          catchUp.outerSync(),
        ]);
      }
      expect(catchUp.syncs).toBe(3);
      expect(progress.length).toBeGreaterThan(0);
      release();
      await catchUp.finish(decodeJoinState(await receiving));
      expect(catchUp.syncs).toBe(3);
      await Promise.all(sending);
      expect(syncedWhenDownloaded).toBe(3);
      const want = members[0]!.stateDict();
      const got = newcomer.stateDict();
      expect(bits(got.global)).toEqual(bits(want.global));
      expect(bits(got.momentumBuffer!)).toEqual(bits(want.momentumBuffer!));
      expect(got.outerStep).toBe(want.outerStep);
      expect(got.innerStep).toBe(want.innerStep);
      expect(bits(await flat(models[2]!))).toEqual(bits(want.global));
      // From here the newcomer trains with the others: one sync of three contributors.
      for (let i = 0; i < H; i++, step++) {
        await Promise.all(
          [...members, newcomer].map(async (d, r) => {
            await backwardOn(models[r]!, seed, r, step);
            await d.step();
          }),
        );
      }
      const after = bits(members[0]!.globalParameters());
      for (const d of [members[1]!, newcomer]) expect(bits(d.globalParameters())).toEqual(after);
      await closeWorld([...two, ...three]);
    },
  );
});
