/**
 * The live memory monitor widget (%gpumem monitor / jupyter_gpumem.Monitor) in a notebook:
 * a replayed synthetic trace draws its series and header; on this GPU-less machine the live
 * monitor shows its explained empty state.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { expectNoTestFolderShown, IMAGES_DIR, openNotebook } from './gpumem';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1100 } });

const MONITOR = '.jupyter-gpumem-monitor';

test('a replay monitor draws its memory bands and a header labelled replay and synthetic', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'monitor_replay.ipynb');
  await page.notebook.runCell(1, true);
  const monitor = page.locator(MONITOR);
  await expect(monitor).toBeVisible({ timeout: 60000 });

  const header = monitor.locator('.jupyter-gpumem-header');
  await expect(header).toContainText('REPLAY');
  await expect(header).toContainText('SYNTHETIC');
  await expect(header).toContainText('JAX arrays');
  await expect(header).toContainText('fragmentation');

  const plot = monitor.locator('.js-plotly-plot').first();
  await expect(plot).toBeVisible({ timeout: 60000 });
  // Each drawn series has a legend entry and at least one drawn path.
  // The series synthetic_bfc_growth_fragmenting has, in the order the monitor ranks them: the bands
  // as they stack (docs/monitor.md), then the lines.
  const legend = plot.locator('.legend .legendtext');
  const drawn = [
    'JAX arrays (in use)', 'JAX pool, unused', 'this process, outside JAX', 'other processes', 'free',
    'bytes_limit', 'peak in use', 'total', 'fragmentation', 'largest free block', 'headroom (limit - pool)'
  ];
  await expect(legend.first()).toBeVisible();
  const names = (await legend.allTextContents()).map(t => t.trim());
  expect(names.filter(n => drawn.includes(n))).toEqual(drawn);
  expect(await plot.locator('.scatterlayer .trace path.js-line, .scatterlayer .trace path.js-fill').count()).toBeGreaterThan(10);
  await expect(plot.locator('.annotation-text')).toContainText('REPLAY · SYNTHETIC');

  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-replay.png') });
});

test('on a machine without an NVIDIA GPU the live monitor explains why it is empty', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'monitor_empty.ipynb');
  await page.notebook.runCell(1, true);
  const monitor = page.locator(MONITOR);
  await expect(monitor).toBeVisible({ timeout: 60000 });
  const empty = monitor.locator('.jupyter-gpumem-empty');
  // The first reading replaces "waiting for the first reading" with the reasons.
  await expect(empty).toContainText('No NVIDIA GPU can be read', { timeout: 30000 });
  await expect(empty).toContainText('will start when JAX does');
  await expect(monitor.locator('.js-plotly-plot')).toHaveCount(0);
  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-empty.png') });
});

test('with JAX on the CPU the live monitor draws the bytes of its live arrays, cell by cell', async ({
  page,
  tmpPath
}) => {
  await openNotebook(page, tmpPath, 'monitor_cpu.ipynb');
  await page.notebook.runCell(1, true); // JAX starts on the CPU, then %gpumem monitor
  const monitor = page.locator(MONITOR);
  await expect(monitor).toBeVisible({ timeout: 60000 });
  const header = monitor.locator('.jupyter-gpumem-header');
  await expect(header).toContainText('JAX memory on the CPU', { timeout: 30000 });
  await expect(header).toContainText("CPU: JAX's live arrays in host memory: JAX live arrays");
  await expect(header).toContainText("of the host's memory (not a GPU)");
  await expect(monitor.locator('.jupyter-gpumem-empty')).toHaveCount(0);

  // Each cell's arrays show in the header's number and the plot's one band.
  await page.notebook.runCell(2, true); // a: 64 MiB
  await expect(header).toContainText('JAX live arrays 64.00 MiB in 1 array of', { timeout: 30000 });
  await page.notebook.runCell(3, true); // b: 128 MiB more
  await expect(header).toContainText('JAX live arrays 192.00 MiB in 2 arrays', { timeout: 30000 });
  await page.notebook.runCell(4, true); // del a
  await expect(header).toContainText('JAX live arrays 128.00 MiB in 1 array of', { timeout: 30000 });

  const plot = monitor.locator('.js-plotly-plot');
  await expect(plot).toHaveCount(1);
  await expect(plot.locator('.legend .legendtext').first()).toHaveText('JAX live arrays (CPU)');
  await expect(plot.locator('.g-ytitle')).toHaveText('MiB');
  // The band went up to 192 MiB and back to 128: its largest drawn value, as plotly holds it.
  const drawn = await plot.evaluate((gd: any) => {
    const band = gd.data.find((t: any) => t.meta === 'cpu_arrays');
    return { max: Math.max(...band.y), last: band.y[band.y.length - 1] };
  });
  expect(drawn).toEqual({ max: 192, last: 128 });
  await expectNoTestFolderShown(monitor, tmpPath);
  // Each cell run is marked with its label, the first one included.
  await expect(plot.locator('.textpoint')).toHaveText(['[2]', '[3]', '[4]']);
  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-cpu.png') });
});
