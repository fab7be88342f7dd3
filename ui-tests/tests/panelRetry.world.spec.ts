/**
 * The panel's notebook section on the fake three-GPU world (synthetic): a kernel that did not
 * answer in time is asked again, after 2, 5, 10, then every 30 s (SNAPSHOT_RETRY_MS in
 * labextension/src/constants.ts), so its answer replaces "The kernel did not answer in time"
 * by itself, with the panel left open and nothing clicked or run.
 */
import { expect, test } from '@jupyterlab/galata';

import { NO_KERNEL_TRACKER, openNotebook, openPanel, waitForKernelIdle } from './gpumem';
import { cellOutput, commMessagesSent, countCommMessagesSent, runCell } from './panelSteps';

test.use({ autoGoto: true, ...NO_KERNEL_TRACKER });

// notebooks/panel_slow_answer.ipynb: 0 loads jupyter_gpumem and makes the kernel leave the
// panel's requests unanswered for 4 s from the first; 1 prints how many went unanswered.
const LOAD_AND_GO_SILENT = 0;
const COUNT_DROPPED = 1;

test('a kernel that did not answer in time is asked again and its answer replaces the message', async ({
  page,
  tmpPath
}) => {
  await openNotebook(page, tmpPath, 'panel_slow_answer.ipynb');
  const panel = await openPanel(page);
  const section = panel.locator('.jp-GpuMem-notebook');
  await runCell(page, LOAD_AND_GO_SILENT);
  await waitForKernelIdle(page);
  // The kernel says it loaded; the panel asks, hears nothing for 3 s (SNAPSHOT_TIMEOUT_MS) and says so.
  await expect(section).toContainText('The kernel did not answer in time; it may be busy.', { timeout: 15000 });
  await countCommMessagesSent(page);
  // Nothing is clicked, reopened or run: the panel asks again 2 s later, and the kernel answers.
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText(/^JAX has not started yet/, { timeout: 15000 });
  await expect(section).not.toContainText('did not answer');
  expect(await commMessagesSent(page)).toBeGreaterThanOrEqual(1);

  await runCell(page, COUNT_DROPPED);
  await expect(cellOutput(page, COUNT_DROPPED)).toHaveText(/^[1-9]\d* requests went unanswered/);
});
