/**
 * The panel against a replayed synthetic trace (the server's demo trace): two A100s, two
 * placeholder kernels on GPU 0 that the server maps to its own running kernels.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import {
  IMAGES_DIR,
  NO_KERNEL_TRACKER,
  notebookMetadata,
  openNotebook,
  openPanel,
  runFirstCell,
  withKernelRestart
} from './gpumem';

test.use({ autoGoto: true, ...NO_KERNEL_TRACKER });

test('a replayed trace shows its devices, labelled replay and synthetic', async ({ page }) => {
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(2);
  await expect(panel.locator('[data-badge="replay"]')).toBeVisible();
  await expect(panel.locator('[data-badge="synthetic"]')).toBeVisible();
});

test('the kernel row of the open notebook is matched to it', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'replay_one.ipynb');
  const panel = await openPanel(page);
  const row = panel.locator('tr.jp-GpuMem-thisKernel');
  await expect(row).toHaveCount(1);
  await expect(row).toContainText('replay_one.ipynb');
  await expect(row).toContainText('this notebook');
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-replay.png') });
});

test('two kernels over-committing a GPU get a warning whose fix sets fraction 1/N and restarts', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'replay_a.ipynb');
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'replay_b.ipynb');
  const panel = await openPanel(page);
  const fix = panel.locator('.jp-GpuMem-fix');
  await expect(panel.locator('.jp-GpuMem-warning').first()).toContainText('kernels share GPU 0');
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-overcommit.png') });
  const label = (await fix.first().textContent()) ?? '';
  const suggested = Number(/fraction ([0-9.]+)/.exec(label)?.[1]);
  expect(suggested).toBeGreaterThan(0);
  expect(suggested).toBeLessThanOrEqual(0.5);
  await withKernelRestart(page, () => fix.first().click());
  expect((await notebookMetadata(page)).fraction).toBe(suggested);
  const output = await runFirstCell(page);
  await expect(output).toContainText(`MEM_FRACTION', '${suggested}'`);
});
