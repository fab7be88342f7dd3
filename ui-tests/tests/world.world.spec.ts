/**
 * The "world" server: JupyterLab with the drop-in pynvml reading the fake three-GPU world
 * (synthetic), for the server and for every kernel it starts.
 */
import { expect, test } from '@jupyterlab/galata';

import { openPanel } from './gpumem';

test.use({ autoGoto: true });

test('the panel lists the fake world three GPUs, labelled synthetic', async ({ page }) => {
  const panel = await openPanel(page);
  // jupyter_gpumem/testing/scenarios.py's three_gpus: three A100 40GB with 32, 10 and 0 GiB used
  // as NVML reads them, 87%, 12% and 0% busy, in index order; GPU 1 reads 6 GiB more while the
  // kernel of statusbar.world.spec.ts (which holds 6 GiB there) is still running.
  const cards = panel.locator('.jp-GpuMem-card');
  await expect(cards.locator('.jp-GpuMem-cardHead')).toHaveText(
    ['GPU 0 · NVIDIA A100-SXM4-40GB', 'GPU 1 · NVIDIA A100-SXM4-40GB', 'GPU 2 · NVIDIA A100-SXM4-40GB'],
    { timeout: 30000 }
  );
  await expect(cards.locator('.jp-GpuMem-memUsed')).toHaveText([
    '32.0 GiB / 40.0 GiB used',
    /^(10|16)\.0 GiB \/ 40\.0 GiB used$/,
    '0 B / 40.0 GiB used'
  ]);
  await expect(cards.locator('.jp-GpuMem-util')).toHaveText(['GPU busy 87%', 'GPU busy 12%', 'GPU busy 0%']);
  await expect(panel.locator('[data-badge="synthetic"]')).toHaveText('synthetic');
});
