/**
 * The cull as a user meets it, on the fake three-GPU world (synthetic). The world server culls
 * idle kernels holding 16 GiB or more 30 s after their last activity, warning from the first
 * idle second (jupyter_server_test_config.py); notebooks/world_cull.ipynb puts its kernel on
 * fake GPU 2 with 20 GiB.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import { IMAGES_DIR, NO_KERNEL_TRACKER, openNotebook, openPanel } from './gpumem';
import { runCell } from './panelSteps';

test.use({ autoGoto: true, ...NO_KERNEL_TRACKER });

const LIMIT_S = 30;

/** Seconds left in a countdown text ("… shut down in 23 s"). */
function secondsLeft(text: string): number {
  const found = /shut down in (\d+) s/.exec(text);
  return found ? Number(found[1]) : -1;
}

test('one countdown per kernel, the row badge, Keep running, and the notice of the shutdown', async ({ page, tmpPath }) => {
  test.setTimeout(240 * 1000);
  await openNotebook(page, tmpPath, 'world_cull.ipynb');
  const panel = await openPanel(page);
  await runCell(page, 0); // this kernel takes 20 GiB of fake GPU 2, then sits idle
  const countdowns = page.locator('.Toastify__toast', { hasText: 'world_cull.ipynb: idle' });
  await expect(countdowns).toHaveCount(1);
  await expect(countdowns).toContainText(/idle \d+ s, holding 20\.0 GiB of GPU 2\. Its kernel will be shut down in \d+ s\./);
  const badge = panel.locator('tr.jp-GpuMem-thisKernel .jp-GpuMem-cullBadge');
  await expect(badge).toHaveText(/^shut down in \d+ s$/);

  // It counts down in place, once a second, and stays one notification.
  const first = secondsLeft(await countdowns.innerText());
  await expect.poll(async () => secondsLeft(await countdowns.innerText()), { timeout: 10000 }).toBeLessThanOrEqual(first - 3);
  await expect(countdowns).toHaveCount(1);
  await expect.poll(async () => secondsLeft(await badge.innerText())).toBeLessThan(first);
  await countdowns.screenshot({ path: path.join(IMAGES_DIR, 'cull-countdown.png') });
  await panel.locator('.jp-GpuMem-kernels').screenshot({ path: path.join(IMAGES_DIR, 'cull-panel-row.png') });

  // Keep running: the server counts its idle time from now, so a new countdown starts at the full
  // limit. Clicked once the old one reads 8 s less than it first did, so a countdown that was not
  // reset reads at least 6 s less than the bound below, however slow the machine; the old
  // notification may still be leaving (its exit animation) when the new one appears.
  await expect.poll(async () => secondsLeft(await countdowns.innerText()), { timeout: 20000 }).toBeLessThanOrEqual(first - 8);
  const clicked = Date.now();
  await countdowns.getByRole('button', { name: 'Keep running' }).click();
  await expect(page.locator('.Toastify__toast', { hasText: 'kept running' })).toContainText(
    `world_cull.ipynb: kept running: it is shut down only once idle ${LIMIT_S} s again.`
  );
  const renewed = page.locator('.Toastify__toast:not([class*="-exit"])', { hasText: 'world_cull.ipynb: idle' });
  await expect(renewed).toHaveCount(1);
  const left = secondsLeft(await renewed.innerText());
  const since = Math.ceil((Date.now() - clicked) / 1000);
  expect(left).toBeGreaterThanOrEqual(LIMIT_S - since - 2);

  // The cull: the countdown becomes the notice of the shutdown, which says why and what it freed.
  const shutdown = page.locator('.Toastify__toast', { hasText: 'world_cull.ipynb: kernel shut down' });
  await expect(shutdown).toContainText(
    /kernel shut down after \d+ s idle; 20\.0 GiB of GPU 2 freed\. Rerun the notebook to get its variables back\./,
    { timeout: (LIMIT_S + 60) * 1000 }
  );
  await expect(countdowns).toHaveCount(0);
  await expect(shutdown.getByRole('button', { name: 'Open notebook' })).toBeVisible();
  await expect(panel.locator('tr.jp-GpuMem-thisKernel')).toHaveCount(0);
  await shutdown.screenshot({ path: path.join(IMAGES_DIR, 'cull-shutdown.png') });

  // A kernel of its own runs cell 1, which takes the dead kernel off the fake GPU for the specs
  // after this one (the culled kernel's session went with it).
  await page.evaluate(async () => {
    const app = (window as any).jupyterapp;
    const code = app.shell.currentWidget.content.widgets[1].model.sharedModel.getSource();
    const kernel = await app.serviceManager.kernels.startNew({ name: 'python3' });
    await kernel.requestExecute({ code }).done;
    await kernel.shutdown();
  });
});
