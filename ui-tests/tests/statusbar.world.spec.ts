/**
 * The status bar item on the fake three-GPU world (synthetic): this notebook's GPU, or a warning
 * when its JAX runs on the CPU while GPUs are there; a click opens the panel.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { IMAGES_DIR, NO_KERNEL_TRACKER, openNotebook, PANEL_ID } from './gpumem';
import { runCell } from './panelSteps';

test.use({ autoGoto: true, ...NO_KERNEL_TRACKER });

const item = '#jp-main-statusbar .jp-GpuMem-statusText';

test('JAX on the CPU while the fake world shows 3 GPUs is a warning, and a click opens the panel', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'panel_live.ipynb');
  await runCell(page, 0); // %load_ext jupyter_gpumem
  await runCell(page, 1); // JAX starts: there is no CUDA plugin here, so on the CPU
  const status = page.locator(item);
  await expect(status).toHaveAttribute('data-warn', 'true');
  await expect(status).toHaveText('⚠ JAX on CPU · 3 GPUs here');
  await expect(status).toHaveAttribute('title', /NVML sees 3 GPUs, but JAX runs on the CPU/);
  await page.locator('#jp-main-statusbar').screenshot({ path: path.join(IMAGES_DIR, 'statusbar-cpu-warning.png') });
  await expect(page.locator(`#${PANEL_ID}`)).toBeHidden();
  await status.click();
  await expect(page.locator(`#${PANEL_ID}`)).toBeVisible();
});

test('a kernel holding memory on a GPU shows how full that GPU is and its share of it', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'world_kernel.ipynb');
  await runCell(page, 0); // this kernel takes 6 GiB of fake GPU 1 (40 GiB)
  const status = page.locator(item);
  // GPU 1 holds 10 GiB of the scenario's other processes besides this kernel's 6 GiB: the
  // GPU's use is said whole, this notebook's share beside it.
  await expect(status).toHaveText('GPU 1 · 16.0/40.0 GiB · this notebook 6.00 GiB');
  await expect(status).toHaveAttribute(
    'title',
    "GPU 1 (NVIDIA A100-SXM4-40GB): 16.0 GiB of 40.0 GiB in use by every process; this notebook's kernel holds 6.00 GiB of it."
  );
  await expect(status).toHaveAttribute('data-warn', 'false');
  await page.locator('#jp-main-statusbar').screenshot({ path: path.join(IMAGES_DIR, 'statusbar-gpu.png') });
});
