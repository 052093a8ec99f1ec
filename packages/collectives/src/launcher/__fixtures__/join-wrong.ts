// A thread rank that asks for a rank or size the launcher did not give it, then joins twice:
// prints each refusal.
import { initProcessGroup } from '../../init-process-group.js';

const refused = async (options: Parameters<typeof initProcessGroup>[0]) => {
  try {
    await initProcessGroup(options);
    console.log('joined');
  } catch (error) {
    console.log((error as Error).message);
  }
};
await refused({ rank: 7 });
await refused({ worldSize: 3 });
const group = await initProcessGroup({ rank: Number(process.env.RANK), worldSize: 2 });
await refused({});
await group.close();
