/**
 * Many GPUs at a glance, on the "mesh" server's fake dgx_h100 world (8 × H100 80GB, synthetic):
 * GPU 5 holds 74 GiB of 80 and is the fullest; the notebook's kernel puts itself on GPU 6 (6 GiB).
 * A server of its own: the server reads how many GPUs there are once, when NVML starts.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { IMAGES_DIR, openNotebook, openPanel } from './gpumem';
import { cellOutput, runCell } from './panelSteps';

test.use({ autoGoto: true, viewport: { width: 1400, height: 1000 } });

test('the panel lists eight GPUs in one compact row each, the fullest marked; a row shows its card', async ({
  page,
  tmpPath
}) => {
  await openNotebook(page, tmpPath, 'world_mesh.ipynb');
  await runCell(page, 0);
  await expect(cellOutput(page, 0)).toHaveText('on GPU 6 of dgx_h100');
  const panel = await openPanel(page);
  const rows = panel.locator('.jp-GpuMem-overviewRow');
  await expect(rows).toHaveCount(8, { timeout: 30000 });
  // jupyter_gpumem/testing/scenarios.py's dgx_h100: 60 GiB on GPUs 0-3, 20 on 4, 74 on 5,
  // 8 on 6 (and this kernel's 6), none on 7; of 79.6 GiB each.
  await expect(rows.locator('.jp-GpuMem-overviewUsed')).toHaveText([
    '60.0/79.6 GiB',
    '60.0/79.6 GiB',
    '60.0/79.6 GiB',
    '60.0/79.6 GiB',
    '20.0/79.6 GiB',
    '74.0/79.6 GiB',
    '14.0/79.6 GiB',
    '0.0/79.6 GiB'
  ]);
  await expect(rows.locator('.jp-GpuMem-overviewPct')).toHaveText(['75%', '75%', '75%', '75%', '25%', '93%', '18%', '0%']);
  await expect(rows.locator('.jp-GpuMem-overviewBusy')).toHaveText(['91%', '90%', '88%', '89%', '35%', '97%', '12%', '0%']);
  await expect(panel.locator('.jp-GpuMem-overviewRow[data-fullest]')).toHaveAttribute('data-device', '5');
  await expect(panel.locator('.jp-GpuMem-overviewFullest')).toHaveText('Fullest: GPU 5 (93%)');
  // Nothing in a row runs past the sidebar's default width.
  const fits = await rows.evaluateAll(els => els.every(el => el.scrollWidth <= el.clientWidth));
  expect(fits).toBe(true);
  // This notebook's 6 GiB on GPU 6, in its small bar and its tooltip.
  const gpu6 = panel.locator('.jp-GpuMem-overviewRow[data-device="6"]');
  await expect(gpu6.locator('.jp-GpuMem-miniMine')).toHaveCount(1);
  await expect(gpu6).toHaveAttribute('title', /This notebook holds 6\.0\/79\.6 GiB/);
  // All eight rows in view at once, above the cards.
  for (let i = 0; i < 8; i++) {
    await expect(rows.nth(i)).toBeInViewport();
  }
  await expect(panel.locator('[data-badge="synthetic"]')).toBeVisible();
  expect(await panel.innerText()).not.toContain(tmpPath);
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-8-gpus.png') });

  const card5 = panel.locator('.jp-GpuMem-card[data-device="5"]');
  await expect(card5).not.toBeInViewport();
  await rows.nth(5).click();
  await expect(card5).toBeInViewport();
  await expect(panel.locator('.jp-GpuMem-cardSlot[data-picked]')).toHaveCount(1);
  await expect(panel.locator('.jp-GpuMem-cardSlot[data-picked] .jp-GpuMem-card')).toHaveAttribute('data-device', '5');
});

test('the monitor says used of total per GPU, marks the fullest, shows full tab titles and opens a tab from the header', async ({
  page,
  tmpPath
}) => {
  await openNotebook(page, tmpPath, 'world_mesh.ipynb');
  await runCell(page, 0);
  await expect(cellOutput(page, 0)).toHaveText('on GPU 6 of dgx_h100');
  await runCell(page, 1);
  await runCell(page, 2); // %gpumem monitor --interval 1
  const monitor = page.locator('.jupyter-gpumem-monitor');
  await expect(monitor.locator('.js-plotly-plot').first()).toBeVisible({ timeout: 60000 });
  const header = monitor.locator('.jupyter-gpumem-header');
  await expect(header.locator('[data-gpumem-tab]')).toHaveCount(8);
  await expect(header).toContainText('GPU 5: NVIDIA H100 80GB HBM3: used 74.00 GiB / 79.65 GiB (93%)');
  await expect(header).toContainText('GPU 0: NVIDIA H100 80GB HBM3: used 60.00 GiB / 79.65 GiB (75%)');
  const fullest = header.locator('div', { hasText: 'fullest' }).last();
  await expect(fullest).toContainText('GPU 5:');

  const tabs = monitor.locator('.jupyter-gpumem-tabs .lm-TabBar-tab');
  await expect(tabs).toHaveCount(8);
  await tabs.nth(3).hover();
  await expect(tabs.nth(3)).toHaveAttribute('title', 'GPU 3: NVIDIA H100 80GB HBM3');

  await header.locator("[data-gpumem-tab='5']").click();
  await expect(tabs.nth(5)).toHaveClass(/lm-mod-current/);
  expect(await monitor.innerText()).not.toContain(tmpPath);
  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-8-gpus.png') });
});
