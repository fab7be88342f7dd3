/**
 * `%gpumem peak CALL` in a notebook, JAX on the CPU: the picture of bytes live over the
 * compiled program's order, stacked by source line with the peak marked, above the report in
 * words.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { expectNoTestFolderShown, IMAGES_DIR, openNotebook } from './gpumem';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1100 } });

test('%gpumem peak draws the bytes live over the program, stacked by source line, the peak marked', async ({
  page,
  tmpPath
}) => {
  await openNotebook(page, tmpPath, 'peak_cpu.ipynb');
  await page.notebook.runCell(1, true); // the model
  await page.notebook.runCell(2, true); // %gpumem peak step(params, batch)
  const output = page.locator('.jp-Cell').nth(2).locator('.jp-OutputArea');
  const plot = output.locator('.js-plotly-plot');
  await expect(plot).toBeVisible({ timeout: 60000 });
  // The report in words stays, under the picture.
  await expect(output).toContainText('Live at the peak, by source line');

  // One band per source line, the line of the notebook's loss among them, and the peak marked.
  const legend = plot.locator('.legend .legendtext');
  await expect(legend.filter({ hasText: /^cell \[1\] line 7 in loss$/ })).toHaveCount(1);
  await expect(legend.filter({ hasText: '(arguments)' })).toHaveCount(1);
  await expect(plot.locator('.annotation-text')).toContainText(/^peak \d/);
  const drawn = await plot.evaluate((gd: any) => ({
    stacked: gd.data.filter((t: any) => t.stackgroup === 'live').length,
    peakAt: gd.layout.shapes[0].x0,
    point: gd.data[gd.data.length - 1].x[0]
  }));
  expect(drawn.stacked).toBeGreaterThanOrEqual(2);
  expect(drawn.point).toBe(drawn.peakAt);

  // Hovering the peak names the values live there: shape and dtype, what made them, where.
  // (plotly's drag layer lies over the point: the mouse goes to where the point is drawn)
  const point = await plot.locator('.scatterlayer .trace').last().locator('.point').boundingBox();
  await page.mouse.move(point!.x + point!.width / 2, point!.y + point!.height / 2);
  const hover = plot.locator('.hoverlayer .hovertext');
  await expect(hover).toContainText('live then:');
  await expect(hover).toContainText('f32[1024,512]');
  await expect(hover).toContainText('cell [1] line 7 in loss');
  await page.mouse.move(0, 0);
  await expect(hover).toHaveCount(0);

  await expectNoTestFolderShown(output, tmpPath);
  await plot.screenshot({ path: path.join(IMAGES_DIR, 'peak-figure.png') });
});
