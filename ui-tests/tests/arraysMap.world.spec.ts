/**
 * `%gpumem arrays --map` in a notebook, JAX on the CPU (the fake world's server): live device
 * memory as an icicle, by the cell that was running, the line that made each array and the name
 * that holds it, above the report in words.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { expectNoTestFolderShown, IMAGES_DIR, openNotebook } from './gpumem';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1100 } });

test('%gpumem arrays --map draws live memory by cell, line and name, the names on hover', async ({
  page,
  tmpPath
}) => {
  await openNotebook(page, tmpPath, 'arrays_map_cpu.ipynb');
  for (const cell of [1, 2, 3]) {
    await page.notebook.runCell(cell, true); // parameters, optimizer state, a kept list and a cache
  }
  await page.notebook.runCell(4, true); // %gpumem arrays --map
  const output = page.locator('.jp-Cell').nth(4).locator('.jp-OutputArea');
  const plot = output.locator('.js-plotly-plot');
  await expect(plot).toBeVisible({ timeout: 60000 });
  // The report in words stays, under the picture.
  await expect(output).toContainText('live JAX arrays');

  // Cells, then lines, then names: each box's bytes are what its children hold.
  const drawn = await plot.evaluate((gd: any) => {
    const t = gd.data[0];
    const at = (label: string) => t.labels.indexOf(label);
    return {
      type: t.type,
      cells: t.labels.filter((_: string, i: number) => t.parents[i] === 'live'),
      parentOfOpt: t.labels[t.ids.indexOf(t.parents[at('opt')])],
      history: t.values[at('history')],
      root: t.values[0]
    };
  });
  expect(drawn.type).toBe('icicle');
  expect(drawn.cells).toEqual(['cell [2]', 'cell [3]', 'cell [1]']);
  expect(drawn.parentOfOpt).toBe('line 2 in adam_state');
  expect(drawn.history).toBe(400 * 256 * 64 * 4);

  // Hovering a name's box says its bytes, how many arrays, and the names that hold them.
  const box = plot.locator('g.slice').filter({ hasText: /^history/ });
  const where = await box.boundingBox();
  await page.mouse.move(where!.x + where!.width / 2, where!.y + where!.height / 2);
  const hover = plot.locator('.hoverlayer .hovertext');
  await expect(hover).toContainText('25.00 MiB');
  await expect(hover).toContainText('400 arrays');
  await expect(hover).toContainText('held as history[399], history[398], history[397]');
  await page.mouse.move(0, 0);
  await expect(hover).toHaveCount(0);

  await expectNoTestFolderShown(output, tmpPath);
  await plot.screenshot({ path: path.join(IMAGES_DIR, 'arrays-map.png') });
});
