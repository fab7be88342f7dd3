/**
 * The panel against a replayed synthetic trace (the server's demo trace): two A100s, two
 * placeholder kernels on GPU 0 that the server maps to its own running kernels.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import {
  IMAGES_DIR,
  NO_KERNEL_TRACKER,
  notebookMetadata,
  openNotebook,
  openPanel,
  runFirstCell,
  withKernelRestart
} from './gpumem';

test.use({ autoGoto: true, ...NO_KERNEL_TRACKER });

test('a replayed trace shows its devices, labelled replay and synthetic', async ({ page }) => {
  const panel = await openPanel(page);
  // jupyter_gpumem/testing/demo_trace.py: two A100 40GB. On GPU 0 two processes hold 30 GiB
  // and 6 or 8 GiB (every other sample), with 512 MiB reserved: 36.5 or 38.5 GiB used, 60% to
  // 64% busy as the trace goes on. GPU 1 holds 2.5 GiB (2 GiB of one process of no kernel,
  // "python train.py" of user demo), 10% busy.
  const cards = panel.locator('.jp-GpuMem-card');
  await expect(cards.locator('.jp-GpuMem-cardHead')).toHaveText([
    'GPU 0 · NVIDIA A100-SXM4-40GB',
    'GPU 1 · NVIDIA A100-SXM4-40GB'
  ]);
  await expect(cards.locator('.jp-GpuMem-memUsed')).toHaveText([
    /^(36|38)\.5 GiB \/ 40\.0 GiB used$/,
    '2.50 GiB / 40.0 GiB used'
  ]);
  await expect(cards.locator('.jp-GpuMem-util')).toHaveText([/^GPU busy 6[0-4]%$/, 'GPU busy 10%']);
  await expect(cards.locator('.jp-GpuMem-procs > summary')).toHaveText(['2 processes', '1 process']);
  const gpu0Bytes = panel.locator('.jp-GpuMem-card[data-device="0"] .jp-GpuMem-procTable tbody td:last-child');
  await expect(gpu0Bytes).toHaveText(['30.0 GiB', /^(6|8)\.00 GiB$/]);
  const gpu1 = panel.locator('.jp-GpuMem-card[data-device="1"]');
  const other = gpu1.locator('.jp-GpuMem-procTable tbody tr');
  await expect(other).toHaveAttribute('data-pid', '4300001');
  await expect(other.locator('.jp-GpuMem-user')).toHaveText('demo');
  await expect(other.locator('.jp-GpuMem-command')).toHaveText('python train.py');
  await expect(other.locator('td').last()).toHaveText('2.00 GiB');
  await expect(gpu1.locator('.jp-GpuMem-legend li')).toHaveText([
    'other kernels 0 B',
    'other processes 2.50 GiB',
    'free 37.5 GiB'
  ]);
  await expect(panel.locator('[data-badge="replay"]')).toHaveText('replay');
  await expect(panel.locator('[data-badge="synthetic"]')).toHaveText('synthetic');
});

test('the kernel row of the open notebook is matched to it', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'replay_one.ipynb');
  const panel = await openPanel(page);
  const row = panel.locator('tr.jp-GpuMem-thisKernel');
  await expect(row).toHaveCount(1);
  await expect(row).toContainText('replay_one.ipynb');
  await expect(row).toContainText('this notebook');
  // A live kernel standing in for a trace's placeholder pid says so.
  await expect(row.locator('.jp-GpuMem-tag', { hasText: 'replay' })).toBeVisible();
  // Its memory is the trace's, not the live kernel's: no Shut down on offer.
  await expect(row.locator('.jp-GpuMem-idle')).toContainText(/idle \d+ (s|min)/);
  await expect(row.getByRole('button', { name: 'Shut down' })).toHaveCount(0);
  // Every column of the kernels table is in view at the sidebar's default width.
  expect(await panel.locator('.jp-GpuMem-scrollX').evaluate(el => el.scrollWidth <= el.clientWidth)).toBe(true);
  // The README shows this picture: no test folder in it.
  expect(await panel.innerText()).not.toContain(tmpPath);
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-replay.png') });
});

test('two kernels over-committing a GPU get a warning whose fix sets fraction 1/N and restarts', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'replay_a.ipynb');
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'replay_b.ipynb');
  const panel = await openPanel(page);
  const fix = panel.locator('.jp-GpuMem-fix');
  await expect(panel.locator('.jp-GpuMem-warning').first()).toContainText('kernels share GPU 0');
  expect(await panel.innerText()).not.toContain(tmpPath);
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-overcommit.png') });
  const label = (await fix.first().textContent()) ?? '';
  const suggested = Number(/fraction ([0-9.]+)/.exec(label)?.[1]);
  expect(suggested).toBeGreaterThan(0);
  expect(suggested).toBeLessThanOrEqual(0.5);
  await withKernelRestart(page, async () => {
    await fix.first().click();
    await page.locator('.jp-Dialog .jp-mod-accept').click();
  });
  expect((await notebookMetadata(page)).fraction).toBe(suggested);
  const output = await runFirstCell(page);
  await expect(output).toContainText(`MEM_FRACTION', '${suggested}'`);
});

test('in JupyterLab Dark no part of the panel keeps a light background', async ({ page, tmpPath }) => {
  // Two kernels: the over-commit warning is on screen too.
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'dark_a.ipynb');
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'dark_b.ipynb');
  await page.theme.setDarkTheme();
  const panel = await openPanel(page);
  await expect(panel.locator('tr.jp-GpuMem-thisKernel')).toHaveCount(1);
  await expect(panel.locator('.jp-GpuMem-warning').first()).toBeVisible();
  // Relative luminance (0 black .. 1 white) of every painted background, a translucent one
  // seen over the panel's own background. Above 0.6 is a pastel or near white (JupyterLab's
  // *-color3 variables); a saturated accent such as the orange of other kernels stays below.
  const light = await panel.evaluate((root: HTMLElement) => {
    const rgba = (el: Element) => {
      const m = /rgba?\(([\d.]+), ([\d.]+), ([\d.]+)(?:, ([\d.]+))?\)/.exec(
        getComputedStyle(el).backgroundColor
      );
      return m ? [Number(m[1]), Number(m[2]), Number(m[3]), m[4] === undefined ? 1 : Number(m[4])] : null;
    };
    const base = rgba(root) ?? [0, 0, 0, 1];
    const out: string[] = [];
    for (const el of [root, ...Array.from(root.querySelectorAll('*'))]) {
      const c = rgba(el);
      if (!c || c[3] === 0) {
        continue;
      }
      const [r, g, b] = [0, 1, 2].map(i => {
        const v = (c[3] * c[i] + (1 - c[3]) * base[i]) / 255;
        return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
      });
      if (0.2126 * r + 0.7152 * g + 0.0722 * b > 0.6) {
        out.push(`${el.tagName.toLowerCase()}.${el.className}: ${getComputedStyle(el).backgroundColor}`);
      }
    }
    return out;
  });
  expect(light).toEqual([]);
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-dark.png') });
});
