/**
 * The GPU cards on the fake three-GPU world (synthetic; docs/fake-gpu.md): GPU 0 holds two
 * processes (30 GiB and 2 GiB, 87% busy), GPU 1 one (10 GiB), GPU 2 none; scenario pids are
 * above PID_MAX_LIMIT, so none is a process here. The notebook's kernel puts itself on GPU 1.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { IMAGES_DIR, openNotebook, openPanel } from './gpumem';
import { runCell } from './panelSteps';

test.use({ autoGoto: true });

test('with one kernel matched by its pid, no GPU speaks of host pids', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'world_kernel.ipynb');
  await runCell(page, 0); // this kernel takes 6 GiB of fake GPU 1
  const panel = await openPanel(page);
  await expect(panel.locator('tr.jp-GpuMem-thisKernel')).toContainText('6.00 GiB');
  const gpu0 = panel.locator('.jp-GpuMem-card[data-device="0"]');
  await expect(gpu0.locator('.jp-GpuMem-legend')).toContainText('other processes 32.0 GiB');
  await expect(panel).not.toContainText('host pids');
  await expect(panel).not.toContainText('cannot tell');
});

test("each GPU lists its processes with pid, user, command and memory; another user's command is not shown", async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'world_kernel.ipynb');
  await runCell(page, 0);
  const panel = await openPanel(page);
  const gpu1 = panel.locator('.jp-GpuMem-card[data-device="1"]');
  await expect(gpu1.locator('.jp-GpuMem-procs > summary')).toHaveText('2 processes');
  await gpu1.locator('.jp-GpuMem-procs > summary').click();
  const rows = gpu1.locator('.jp-GpuMem-procTable tbody tr');
  // Most memory first: the scenario's 10 GiB process, then this kernel's 6 GiB.
  await expect(rows).toHaveCount(2);
  await expect(rows.nth(0)).toHaveAttribute('data-pid', '4200201');
  await expect(rows.nth(0)).toContainText('not a process here');
  await expect(rows.nth(0)).toContainText('10.0 GiB');
  const kernelRow = rows.nth(1);
  await expect(kernelRow).toHaveAttribute('data-kind', 'kernel');
  await expect(kernelRow).toContainText('kernel of world_kernel.ipynb');
  await expect(kernelRow).toContainText('6.00 GiB');
  await expect(kernelRow.locator('.jp-GpuMem-user')).not.toHaveText('–'); // the server's own user: named
  await expect(rows.nth(0).locator('.jp-GpuMem-user')).toHaveText('–'); // no process here: nobody to name
  // Every cell in view at the sidebar's default width: nothing runs into its neighbour.
  const fits = await gpu1
    .locator('.jp-GpuMem-procTable th, .jp-GpuMem-procTable .jp-GpuMem-procWho')
    .evaluateAll(els => els.every(el => el.scrollWidth <= el.clientWidth));
  expect(fits).toBe(true);
  // The headers read as two words apart, not "pid · user · commandmemory": the gap between their
  // texts, as drawn, is at least a space's width at the panel's font.
  const headerGap = await gpu1.locator('.jp-GpuMem-procTable thead tr').evaluate(row => {
    const [who, memory] = Array.from(row.querySelectorAll('th')).map(th => {
      const range = document.createRange();
      range.selectNodeContents(th);
      return range.getBoundingClientRect();
    });
    return memory.left - who.right;
  });
  expect(headerGap).toBeGreaterThanOrEqual(8);
  const gpu0 = panel.locator('.jp-GpuMem-card[data-device="0"]');
  await gpu0.locator('.jp-GpuMem-procs > summary').click();
  await expect(gpu0.locator('.jp-GpuMem-procTable tbody tr')).toHaveCount(2);
  expect(await panel.innerText()).not.toContain(tmpPath);
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-processes.png') });
});

test('a card says "GPU busy" apart from memory, and its legend adds up to the card', async ({ page }) => {
  const panel = await openPanel(page);
  const gpu0 = panel.locator('.jp-GpuMem-card[data-device="0"]');
  await expect(gpu0.locator('.jp-GpuMem-util')).toHaveText('GPU busy 87%');
  await expect(gpu0.locator('.jp-GpuMem-memUsed')).toHaveText('32.0 GiB / 40.0 GiB used');
  await expect(gpu0.locator('.jp-GpuMem-memUsed')).not.toContainText('%');
  // 32.0 used + 7.50 free of 40.0: the driver keeps the other 512 MiB.
  const legend = gpu0.locator('.jp-GpuMem-legend');
  await expect(legend).toContainText('reserved by the driver 512 MiB');
  await expect(legend).toContainText('free 7.50 GiB');
});

test('with no notebook open there is no "this notebook" share', async ({ page }) => {
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(3, { timeout: 30000 });
  await expect(panel.locator('.jp-GpuMem-legend')).not.toContainText(['this notebook']);
  await expect(panel.locator('.jp-GpuMem-legend', { hasText: 'this notebook' })).toHaveCount(0);
});

test('a GPU that drives a display is marked', async ({ page, tmpPath }) => {
  test.setTimeout(120000);
  await openNotebook(page, tmpPath, 'world_display.ipynb');
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(3, { timeout: 30000 });
  await expect(panel.locator('.jp-GpuMem-displayTag')).toHaveCount(0);
  await runCell(page, 0); // fake GPU 2 drives a display
  try {
    const tag = panel.locator('.jp-GpuMem-card[data-device="2"] .jp-GpuMem-displayTag');
    await expect(tag).toHaveText('display');
    await expect(panel.locator('.jp-GpuMem-displayTag')).toHaveCount(1);
    await panel.locator('.jp-GpuMem-card[data-device="2"]').screenshot({ path: path.join(IMAGES_DIR, 'panel-display-gpu.png') });
  } finally {
    await runCell(page, 1); // and no longer does, for the specs after this one
  }
  await expect(panel.locator('.jp-GpuMem-displayTag')).toHaveCount(0);
});
