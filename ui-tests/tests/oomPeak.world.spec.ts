/**
 * A jitted call that runs out of memory in a notebook, JAX on the CPU (the fake world's
 * server): the OOM report, and under it the failing call's program drawn as `%gpumem peak`
 * draws one (bytes live over its order by source line, the peak marked).
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { expectNoTestFolderShown, IMAGES_DIR, openNotebook } from './gpumem';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1100 } });

test('the OOM report draws the failing call’s program under its words', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'oom_peak_cpu.ipynb');
  await page.notebook.runCell(1, true); // the model
  await page.notebook.runCell(2, true); // the call whose output cannot fit
  const output = page.locator('.jp-Cell').nth(2).locator('.jp-OutputArea');
  await expect(output).toContainText('JAX ran out of memory');
  const plot = output.locator('.js-plotly-plot');
  await expect(plot).toBeVisible({ timeout: 60000 });
  // The words come first, the picture under them.
  const words = await output.locator('.jupyter-gpumem-oom').boundingBox();
  const picture = await plot.boundingBox();
  expect(words!.y + words!.height).toBeLessThanOrEqual(picture!.y);

  await expect(plot.locator('.gtitle')).toContainText('the failing call loss (cell [2] line 1)');
  const legend = plot.locator('.legend .legendtext');
  await expect(legend.filter({ hasText: /^cell \[1\] line 8 in loss$/ })).toHaveCount(1);
  await expect(plot.locator('.annotation-text')).toContainText('peak 256.00 TiB');

  // The peak's point names the values live there, with their lines (here the peak is at the
  // program's first step, where every band's point lies under it: read from the drawn figure).
  const peakHover = await plot.evaluate((gd: any) => gd.data[gd.data.length - 1].hovertemplate);
  expect(peakHover).toContain('live then:');
  expect(peakHover).toContain('cell [1] line 8 in loss');

  await expectNoTestFolderShown(output, tmpPath);
  await plot.screenshot({ path: path.join(IMAGES_DIR, 'oom-peak-figure.png') });
});
