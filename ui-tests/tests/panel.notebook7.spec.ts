/**
 * The panel in Notebook 7's notebook page (the live server, no GPU here). Galata's `page`
 * drives JupyterLab only, so the notebook page is a plain page of the same browser context.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { IMAGES_DIR, NO_KERNEL_TRACKER, NOTEBOOKS_DIR, PANEL_ID } from './gpumem';

test.use({ autoGoto: false, ...NO_KERNEL_TRACKER });

test('in Notebook 7 the panel opens from View > Left Sidebar and explains that there is no GPU', async ({ context, page: lab, tmpPath }) => {
  await lab.contents.uploadFile(path.join(NOTEBOOKS_DIR, 'xla_env.ipynb'), `${tmpPath}/nb7.ipynb`);
  const page = await context.newPage();
  await page.goto(`notebooks/${tmpPath}/nb7.ipynb`);
  await page.locator('.jp-NotebookPanel').waitFor();
  // Lumino gives submenu items no role: find them by class and text.
  const leftSidebar = page.locator('.lm-Menu-item', { hasText: 'Left Sidebar' });
  // Notebook 7 adds the sidebar submenus once the app is restored: reopen View until then.
  await expect(async () => {
    await page.keyboard.press('Escape');
    await page.getByRole('menuitem', { name: 'View' }).click();
    await expect(leftSidebar).toBeVisible({ timeout: 1000 });
  }).toPass({ timeout: 30000 });
  await leftSidebar.hover();
  await page.locator('.lm-Menu-item', { hasText: 'Show GPU memory' }).click();
  const panel = page.locator(`#${PANEL_ID}`);
  await expect(panel).toBeVisible();
  await expect(panel.locator('.jp-GpuMem-notice').first()).toContainText(
    /No GPU here|NVML is not available/
  );
  // The open notebook is the panel's notebook, as in JupyterLab.
  // The name, not the folder: screenshots show no test folder.
  await expect(panel.locator('.jp-GpuMem-path')).toHaveText('nb7.ipynb');
  await expect(panel.locator('.jp-GpuMem-path')).toHaveAttribute('title', `${tmpPath}/nb7.ipynb`);
  const offer = panel.locator('.jp-GpuMem-notice', { hasText: 'not loaded' });
  await expect(offer).toContainText('jupyter_gpumem is not loaded in this kernel');
  await expect(panel.locator('.jp-GpuMem-load')).toHaveText('Load jupyter_gpumem');
  await page.screenshot({ path: path.join(IMAGES_DIR, 'panel-notebook7.png') });
  // The panel talks with the notebook's kernel here too: loading answers with the kernel's state.
  await panel.locator('.jp-GpuMem-load').click();
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText('JAX has not started yet; readings begin when it does');
  await expect(offer).toHaveCount(0);
  await page.close();
});
