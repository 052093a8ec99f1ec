import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { measureDiloco, streamVariants } from './diloco-runs.js';
const dir = await mkdtemp(join(tmpdir(), 'mix-'));
const shape = { ranks: 4, steps: 1000, innerSteps: 50, batch: 16, block: 32, embd: 64, layers: 2 };
for (const mixing of ['0']) {
  const v = streamVariants(50, 5, 10, ['topk'])[0]!;
  const m = await measureDiloco(dir, shape, { name: `${v.name} mixing ${mixing}`, args: [...v.args, '--outer-mixing', mixing] }, 'none');
  console.log(v.name, 'mixing', mixing, 'loss', m.heldOutLoss, 'tokens/s', Math.round(m.tokensPerSecond));
}
