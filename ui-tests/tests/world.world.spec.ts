/**
 * The "world" server: JupyterLab with the drop-in pynvml reading the fake three-GPU world
 * (synthetic), for the server and for every kernel it starts.
 */
import { expect, test } from '@jupyterlab/galata';

import { openNotebook, openPanel } from './gpumem';
import { cellOutput, runCell } from './panelSteps';

test.use({ autoGoto: true });

test('the panel lists the fake world three GPUs, labelled synthetic', async ({ page, tmpPath }) => {
  // Kernels of other world specs put themselves on GPU 1 and stay in the world after they end:
  // the world goes back to its scenario first, so what the panel shows is the scenario's alone.
  await openNotebook(page, tmpPath, 'world_reset.ipynb');
  await runCell(page, 0);
  await expect(cellOutput(page, 0)).toHaveText('reset to three_gpus');
  const panel = await openPanel(page);
  // jupyter_gpumem/testing/scenarios.py's three_gpus: three A100 40GB with 32, 10 and 0 GiB used
  // as NVML reads them, 87%, 12% and 0% busy, in index order; GPU 0's processes hold 30 and
  // 2 GiB, GPU 1's 10 GiB, GPU 2 has none.
  const cards = panel.locator('.jp-GpuMem-card');
  await expect(cards.locator('.jp-GpuMem-cardHead')).toHaveText(
    ['GPU 0 · NVIDIA A100-SXM4-40GB', 'GPU 1 · NVIDIA A100-SXM4-40GB', 'GPU 2 · NVIDIA A100-SXM4-40GB'],
    { timeout: 30000 }
  );
  await expect(cards.locator('.jp-GpuMem-memUsed')).toHaveText([
    '32.0 GiB / 40.0 GiB used',
    '10.0 GiB / 40.0 GiB used',
    '0 B / 40.0 GiB used'
  ]);
  await expect(cards.locator('.jp-GpuMem-util')).toHaveText(['GPU busy 87%', 'GPU busy 12%', 'GPU busy 0%']);
  await expect(cards.locator('.jp-GpuMem-procs > summary')).toHaveText(['2 processes', '1 process']);
  const rows = (device: number) => panel.locator(`.jp-GpuMem-card[data-device="${device}"] .jp-GpuMem-procTable tbody tr`);
  const pidsAndBytes = (device: number) =>
    rows(device).evaluateAll(trs => trs.map(tr => [tr.getAttribute('data-pid'), tr.lastElementChild?.textContent]));
  expect(await pidsAndBytes(0)).toEqual([
    ['4200101', '30.0 GiB'],
    ['4200102', '2.00 GiB']
  ]);
  expect(await pidsAndBytes(1)).toEqual([['4200201', '10.0 GiB']]);
  await expect(panel.locator('[data-badge="synthetic"]')).toHaveText('synthetic');
});
