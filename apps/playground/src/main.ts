// The playground's page: train a GPT in this tab, or, opened with a job's `#token=...` link,
// join that `webshard-train --browser-ranks` job as one of its ranks.
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { mountJoinView } from './join/join-view.js';
import { mountTrainView } from './ui/train-view.js';

const root = document.getElementById('app')!;
const token = new URLSearchParams(location.hash.slice(1)).get('token');
const globals = window as { webshardPlayground?: unknown; webshardJoin?: unknown };
if (token !== null) {
  document.body.classList.add('join-mode');
  globals.webshardJoin = mountJoinView(root, token);
} else {
  globals.webshardPlayground = mountTrainView(root);
}
