import uPlot from 'uplot';

/** One line (or set of points) of a chart. */
export interface SeriesSpec {
  label: string;
  color: string;
  /** Points only (held-out losses), not a line. */
  points?: boolean;
}

/** What a chart draws: its title, y label, lines, and whether y is on a log scale. */
export interface ChartSpec {
  title: string;
  yLabel: string;
  series: SeriesSpec[];
  log?: boolean;
  format?: (value: number) => string;
}

/**
 * A uPlot chart that grows as a run goes: steps on x, one y per series (null where a series has
 * no value at a step, as held-out losses between evaluations). Points arrive one at a time and
 * are drawn at most once a frame. The same library as the trainer's report (report/), so a run
 * looks the same live in the page and afterwards in its report.
 */
export class LiveChart {
  readonly xs: number[] = [];
  readonly ys: (number | null)[][];
  private plot: uPlot;
  private pending = false;

  constructor(
    private readonly figure: HTMLElement,
    private spec: ChartSpec,
  ) {
    this.ys = spec.series.map(() => []);
    this.plot = this.create();
  }

  /** The uPlot instance (tests read its axes, series and data). */
  get uplot(): uPlot {
    return this.plot;
  }

  /** Sets series `index`'s value at step `x` (x only grows, or repeats the last step). */
  add(index: number, x: number, y: number): void {
    if (this.xs.at(-1) !== x) {
      this.xs.push(x);
      for (const ys of this.ys) ys.push(null);
    }
    this.ys[index]![this.xs.length - 1] = y;
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.plot.setData([this.xs, ...this.ys] as uPlot.AlignedData);
    });
  }

  /** Drops every point (a reset). */
  clear(): void {
    this.xs.length = 0;
    for (const ys of this.ys) ys.length = 0;
    this.plot.setData([this.xs, ...this.ys] as uPlot.AlignedData);
  }

  /** Redraws with y on a log scale or not (uPlot fixes a scale's kind when it builds). */
  setLog(log: boolean): void {
    this.spec = { ...this.spec, log };
    this.plot.destroy();
    this.plot = this.create();
  }

  private create(): uPlot {
    const { spec } = this;
    const width = Math.max(320, Math.min(640, this.figure.clientWidth || 640));
    const format = spec.format;
    return new uPlot(
      {
        title: spec.title,
        width,
        height: 240,
        scales: { x: { time: false }, y: spec.log ? { distr: 3 } : {} },
        axes: [
          { label: 'step' },
          {
            label: spec.yLabel,
            size: 64,
            ...(format ? { values: (_u: uPlot, ticks: number[]) => ticks.map(format) } : {}),
          },
        ],
        series: [
          { label: 'step' },
          ...spec.series.map((s) =>
            s.points
              ? {
                  label: s.label,
                  stroke: s.color,
                  fill: s.color,
                  paths: () => null,
                  points: { show: true, size: 7, fill: s.color },
                }
              : {
                  label: s.label,
                  stroke: s.color,
                  width: 1.5,
                  spanGaps: true,
                  points: { show: false },
                },
          ),
        ],
      },
      [this.xs, ...this.ys] as uPlot.AlignedData,
      this.figure,
    );
  }
}
