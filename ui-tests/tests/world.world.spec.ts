/**
 * The "world" server: JupyterLab with the drop-in pynvml reading the fake three-GPU world
 * (synthetic), for the server and for every kernel it starts.
 */
import { expect, test } from '@jupyterlab/galata';

import { openPanel } from './gpumem';

test.use({ autoGoto: true });

test('the panel lists the fake world three GPUs, labelled synthetic', async ({ page }) => {
  const panel = await openPanel(page);
  const devices = panel.locator('.jp-GpuMem-card');
  await expect(devices).toHaveCount(3, { timeout: 30000 });
  await expect(panel.locator('[data-badge="synthetic"]')).toBeVisible();
});
