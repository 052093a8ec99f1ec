/**
 * The report's own script (a string the page runs after uPlot's): it reads the runs from the
 * page's JSON block and draws each chart with uPlot: loss (train as lines, held-out as points, a
 * log scale on demand), tokens per second and peak memory (one line per rank where the run has
 * them), steps or tokens on x, every run of an overlay in its own color. uPlot gives the axes their
 * ticks and grid and the legend its values under the cursor.
 */
export const REPORT_SCRIPT = String.raw`(() => {
  const data = JSON.parse(document.getElementById('report-data').textContent);
  const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf'];
  const charts = document.getElementById('charts');
  const logLoss = document.getElementById('log-loss');
  const xAxis = document.getElementById('x-axis');
  const fmtBytes = (v) => v == null ? '' : v >= 2 ** 30 ? (v / 2 ** 30).toFixed(2) + ' GiB' : v >= 2 ** 20 ? (v / 2 ** 20).toFixed(1) + ' MiB' : (v / 1024).toFixed(0) + ' KiB';
  const xOf = (run, step) => xAxis.value === 'tokens' ? step * run.tokensPerStep : step;
  const prefix = (run) => data.runs.length > 1 ? run.name + ': ' : '';
  function chart(id, title, yLabel, lines, options = {}) {
    const tables = lines.map((l) => [l.xs, l.ys]);
    const joined = uPlot.join(tables);
    const series = [{ label: xAxis.value === 'tokens' ? 'tokens' : 'step' }].concat(lines.map((l) => l.points
      ? { label: l.label, stroke: l.color, fill: l.color, paths: () => null, points: { show: true, size: 7, fill: l.color } }
      : { label: l.label, stroke: l.color, width: 1.5, spanGaps: true, points: { show: false }, dash: l.dash ? [4, 3] : undefined }));
    const figure = document.createElement('figure');
    figure.id = id;
    const caption = document.createElement('figcaption');
    caption.textContent = title;
    figure.appendChild(caption);
    charts.appendChild(figure);
    return new uPlot({
      width: 680,
      height: 260,
      series,
      scales: { x: { time: false }, y: options.log ? { distr: 3 } : {} },
      axes: [
        { label: xAxis.value === 'tokens' ? 'tokens' : 'step' },
        { label: yLabel, size: 70, values: options.format ? (u, ticks) => ticks.map(options.format) : undefined },
      ],
    }, joined, figure);
  }
  function draw() {
    charts.replaceChildren();
    const loss = [], speed = [], memory = [];
    data.runs.forEach((run, r) => {
      const c = (k) => COLORS[(r * 2 + k) % COLORS.length];
      const xs = run.records.map((p) => xOf(run, p.step));
      loss.push({ label: prefix(run) + 'train loss', color: c(0), xs, ys: run.records.map((p) => p.loss) });
      if (run.evals.length > 0) loss.push({ label: prefix(run) + 'held-out loss', color: c(1), points: true, xs: run.evals.map((e) => xOf(run, e.step)), ys: run.evals.map((e) => e.loss) });
      speed.push({ label: prefix(run) + 'tokens/s', color: c(0), xs, ys: run.records.map((p) => p.tokensPerSecond) });
      const ranks = run.records[0] && run.records[0].peakDeviceBytesPerRank ? run.records[0].peakDeviceBytesPerRank.length : 0;
      const speedRanks = run.records[0] && run.records[0].tokensPerSecondPerRank ? run.records[0].tokensPerSecondPerRank.length : 0;
      for (let k = 0; k < speedRanks; k++) speed.push({ label: prefix(run) + 'rank ' + k + ' tokens/s', color: COLORS[(r * speedRanks + k + 1) % COLORS.length], dash: true, xs, ys: run.records.map((p) => p.tokensPerSecondPerRank ? p.tokensPerSecondPerRank[k] : null) });
      if (ranks > 1) {
        for (let k = 0; k < ranks; k++) memory.push({ label: prefix(run) + 'rank ' + k + ' peak device', color: COLORS[(r * ranks + k) % COLORS.length], xs, ys: run.records.map((p) => p.peakDeviceBytesPerRank ? p.peakDeviceBytesPerRank[k] : null) });
      } else {
        memory.push({ label: prefix(run) + 'peak device', color: c(0), xs, ys: run.records.map((p) => p.peakDeviceBytes) });
      }
      if (run.records.some((p) => p.peakHostBytes > 0)) memory.push({ label: prefix(run) + 'peak host (RSS)', color: c(1), xs, ys: run.records.map((p) => p.peakHostBytes || null) });
    });
    // The charts, for a test (or a console) to read back what each draws.
    window.webshardCharts = [
      chart('chart-loss', 'Loss', 'loss', loss, { log: logLoss.checked }),
      chart('chart-speed', 'Tokens per second', 'tokens/s', speed),
      chart('chart-memory', 'Peak memory', 'bytes', memory, { format: fmtBytes }),
    ];
  }
  if (!data.runs.every((run) => run.tokensPerStep > 0)) xAxis.querySelector('[value=tokens]').disabled = true;
  logLoss.addEventListener('change', draw);
  xAxis.addEventListener('change', draw);
  draw();
})();`;
