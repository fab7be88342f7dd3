import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

/** The live monitor's plot in the browser (jupyter_gpumem/monitor/monitor_plot.js), as far as these tests use it. */
interface Store {
  t: number[];
  y: Record<string, (number | null)[]>;
}
interface MonitorPlot {
  extremeRows(columns: (number | null)[][], lo: number, hi: number, maxRows: number): number[];
  storeFrom(figure: object): Store;
  append(store: Store, msg: { t: number[]; y: Record<string, (number | null)[]> }): void;
}
const plot = require('../../../jupyter_gpumem/monitor/monitor_plot.js') as MonitorPlot;

/** A reproducible wobble in [0, 1) (no Math.random: a failure must replay). */
function wobble(i: number): number {
  return ((i * 7919) % 1000) / 1000;
}

describe('extremeRows (the kernel rule, series.decimate_rows)', () => {
  test("each bucket keeps the rows of each series' minimum and maximum, and the first and last row", () => {
    // 8 rows, at most 6: two buckets of 4. A one-row spike at row 3, which every-other-row would drop.
    const inUse = [1, 1, 1, 9, 1, 1, 1, 1];
    assert.deepEqual(plot.extremeRows([inUse], 0, 8, 6), [0, 3, 4, 7]);
  });

  test('a dip is kept as surely as a spike, and rows are whole: one index list for every series', () => {
    const inUse = [2, 2, 2, 2, 2, 2, 2, 2];
    const headroom = [5, 5, 5, 5, 5, 0.5, 5, 5];
    assert.deepEqual(plot.extremeRows([inUse, headroom], 0, 8, 6), [0, 4, 5, 7]);
  });

  test('only the rows from lo to hi are thinned, and unknown values are passed over', () => {
    // Rows 1-8 in two buckets: 1-4 (low at 1, spike at 4) and 5-8 (row 5 unknown: low and high at 6).
    const inUse = [100, 1, 1, null, 9, null, 1, 1, 1, 100];
    assert.deepEqual(plot.extremeRows([inUse], 1, 9, 6), [1, 4, 6, 8]);
  });

  test('as many rows as allowed or fewer are returned as they are', () => {
    assert.deepEqual(plot.extremeRows([[3, 1, 2]], 0, 3, 3), [0, 1, 2]);
  });

  test("too many distinct extremes: fewer, wider buckets, within the budget, every series' peak and low kept", () => {
    const columns = [0, 1, 2, 3].map(c =>
      Array.from({ length: 1000 }, (_, i) => wobble(i * 4 + c))
    );
    const rows = plot.extremeRows(columns, 0, 1000, 60);
    assert.ok(rows.length <= 60, `${rows.length} rows`);
    for (const col of columns) {
      assert.ok(rows.some(i => col[i] === Math.max(...col)));
      assert.ok(rows.some(i => col[i] === Math.min(...col)));
    }
  });
});

describe('the live plot past its point budget', () => {
  const series = [{ name: 'jax_in_use' }, { name: 'headroom' }];
  const GiB_SPIKE = 39.5;

  /** A store fed one reading a second, as the kernel's append messages bring them. */
  function fed(
    count: number,
    maxPoints: number,
    windowS: number,
    at: (i: number) => [number, number]
  ): Store {
    const store = plot.storeFrom({
      series,
      t: [],
      y: {},
      window_s: windowS,
      max_points: maxPoints
    });
    for (let i = 0; i < count; i++) {
      const [inUse, headroom] = at(i);
      plot.append(store, { t: [i], y: { jax_in_use: [inUse], headroom: [headroom] } });
    }
    return store;
  }

  const readings = (i: number): [number, number] =>
    i === 1001 ? [GiB_SPIKE, 0.25] : i === 2503 ? [2, 0.1] : [2 + wobble(i), 30 + wobble(i + 1)];

  test('a one-reading spike and a one-reading dip stay drawn, with their own rows, however often the window is thinned', () => {
    const store = fed(6000, 2000, 1e9, readings);
    const spike = store.t.indexOf(1001);
    const dip = store.t.indexOf(2503);
    assert.deepEqual([store.y.jax_in_use[spike], store.y.headroom[spike]], [GiB_SPIKE, 0.25]);
    assert.deepEqual([store.y.jax_in_use[dip], store.y.headroom[dip]], [2, 0.1]);
  });

  test('never more than max_points readings, and the first thinning keeps as many as halving did', () => {
    const store = plot.storeFrom({ series, t: [], y: {}, window_s: 1e9, max_points: 2000 });
    let most = 0;
    for (let i = 0; i < 6000; i++) {
      const [inUse, headroom] = readings(i);
      plot.append(store, { t: [i], y: { jax_in_use: [inUse], headroom: [headroom] } });
      most = Math.max(most, store.t.length);
      if (i === 2000) {
        assert.ok(store.t.length <= 1501, `${store.t.length} after the first thinning`); // 500 + 1001
      }
    }
    assert.equal(most, 2000);
  });

  test('the newer half is left whole, and readings older than the window go', () => {
    const store = fed(3000, 2000, 2500, readings);
    assert.ok(store.t[0] >= 3000 - 1 - 2500, `the oldest reading drawn is from ${store.t[0]}`);
    const newest = store.t.slice(-1000);
    assert.deepEqual(
      newest,
      Array.from({ length: 1000 }, (_, i) => 2000 + i)
    );
  });
});
