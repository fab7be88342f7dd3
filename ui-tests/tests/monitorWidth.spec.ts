/**
 * The monitor in a notebook beside the open sidebar, at a laptop's 1440 px: one page, no
 * horizontal scrollbars of its own inside the cell's output, and no test folder in view.
 */
import { expect, test } from '@jupyterlab/galata';

import { expectNoTestFolderShown, openNotebook, openPanel } from './gpumem';

test.use({ autoGoto: true, viewport: { width: 1440, height: 900 } });

test('a replay monitor beside the open sidebar at 1440 px scrolls sideways nowhere', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'monitor_replay.ipynb');
  await openPanel(page);
  await page.notebook.runCell(1, true);
  const monitor = page.locator('.jupyter-gpumem-monitor');
  await expect(monitor.locator('.js-plotly-plot').first()).toBeVisible({ timeout: 60000 });
  await page.waitForTimeout(1000);
  const scrolling = await page.evaluate(() => {
    const out: string[] = [];
    const area = document.querySelector('.jp-NotebookPanel-notebook');
    for (const el of Array.from((area ?? document).querySelectorAll('*'))) {
      const style = getComputedStyle(el);
      if (['auto', 'scroll'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1) {
        out.push(`${el.tagName}.${(el as HTMLElement).className} ${el.scrollWidth} > ${el.clientWidth}`);
      }
    }
    return out;
  });
  await page.screenshot({ path: test.info().outputPath('monitor-1440.png') });
  expect(scrolling).toEqual([]);
  // The panel's notebook section names the notebook; its folder, the test's, is only in the tooltip.
  await expect(page.locator('#jupyter-gpumem-panel .jp-GpuMem-path')).toHaveText('monitor_replay.ipynb');
  await expectNoTestFolderShown(page.locator('body'), tmpPath); // the file browser is closed
});
