/**
 * The "world" server: JupyterLab with the drop-in pynvml reading the fake three-GPU world
 * (synthetic), for the server and for every kernel it starts.
 */
import { expect, test } from '@jupyterlab/galata';

import { openPanel } from './gpumem';

test.use({ autoGoto: true });

test('the panel lists the fake world three GPUs, labelled synthetic', async ({ page }) => {
  const panel = await openPanel(page);
  // jupyter_gpumem/testing/scenarios.py's three_gpus: three A100 40GB holding 32, 10 and 0 GiB,
  // 87%, 12% and 0% busy, in index order.
  const heads = panel.locator('.jp-GpuMem-card .jp-GpuMem-cardHead');
  await expect(heads).toHaveText(
    [
      /^GPU 0 · NVIDIA A100-SXM4-40GB\s*32\.0 GiB \/ 40\.0 GiB · 87% busy$/,
      /^GPU 1 · NVIDIA A100-SXM4-40GB\s*10\.0 GiB \/ 40\.0 GiB · 12% busy$/,
      /^GPU 2 · NVIDIA A100-SXM4-40GB\s*0 B \/ 40\.0 GiB · 0% busy$/
    ],
    { timeout: 30000 }
  );
  await expect(panel.locator('[data-badge="synthetic"]')).toHaveText('synthetic');
});
