/**
 * The panel on the fake three-GPU world (synthetic): it keeps up with its kernel without
 * polling it, its settings form, and the kernels table with each idle kernel's idle time.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import {
  IMAGES_DIR,
  NO_KERNEL_TRACKER,
  notebookMetadata,
  openNotebook,
  openPanel,
  waitForKernelIdle,
  withKernelRestart
} from './gpumem';
import { cellOutput, commMessagesSent, countCommMessagesSent, runCell, savedMetadata } from './panelSteps';

test.use({ autoGoto: true, ...NO_KERNEL_TRACKER });

// notebooks/panel_live.ipynb: 0 loads jupyter_gpumem, 1 starts JAX (on the CPU here),
// 2 sleeps 5 s, 3 is %gpumem status.
const LOAD = 0;
const START_JAX = 1;
const SLEEP = 2;
const STATUS = 3;

test('the panel shows the kernel once a cell loads jupyter_gpumem, within 1 s of idle', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'panel_live.ipynb');
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuMem-load')).toBeVisible();
  await runCell(page, LOAD);
  await waitForKernelIdle(page);
  // The kernel says it loaded (a comm it opens) and the panel asks at once: no retry timer.
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText(/^JAX has not started yet/, { timeout: 1000 });
  await runCell(page, START_JAX);
  await waitForKernelIdle(page);
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText('JAX started on cpu', { timeout: 1000 });
});

test('while a cell runs the panel says busy and when it last heard, never "not loaded" or "did not answer"', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'panel_live.ipynb');
  const panel = await openPanel(page);
  await runCell(page, LOAD);
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText(/^JAX has not started yet/);
  await runCell(page, SLEEP, false);
  const busy = panel.locator('.jp-GpuMem-busy');
  await expect(busy).toHaveText(/^Busy; last state at \d\d:\d\d:\d\d$/);
  // The old panel asked every 2 s and called the kernel "not loaded" or "did not answer" after
  // 3 s; the cell sleeps 5 s. The last state stays on screen below the busy line.
  for (let i = 0; i < 8; i++) {
    await page.waitForTimeout(500);
    const text = (await panel.locator('.jp-GpuMem-notebook').first().innerText()) ?? '';
    expect(text).not.toMatch(/did not answer|not loaded/);
    await expect(panel.locator('.jp-GpuMem-backend')).toHaveText(/^JAX has not started yet/);
  }
  await panel.locator('.jp-GpuMem-notebook').first().screenshot({ path: path.join(IMAGES_DIR, 'panel-busy.png') });
  await waitForKernelIdle(page);
  await expect(busy).toHaveCount(0, { timeout: 1000 });
});

test('a notebook shown again while its cell runs is not called unanswering', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb', 'second.ipynb');
  await openNotebook(page, tmpPath, 'panel_live.ipynb', 'first.ipynb');
  const panel = await openPanel(page);
  await runCell(page, LOAD);
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText(/^JAX has not started yet/);
  await runCell(page, SLEEP, false);
  // Away and back while the cell sleeps: the panel never saw that cell start.
  await page.notebook.activate('second.ipynb');
  await expect(panel.locator('.jp-GpuMem-path')).toContainText('second.ipynb');
  await page.notebook.activate('first.ipynb');
  for (let i = 0; i < 8; i++) {
    await page.waitForTimeout(500);
    const text = (await panel.locator('.jp-GpuMem-notebook').first().innerText()) ?? '';
    expect(text).not.toMatch(/did not answer|not loaded/);
  }
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText(/^JAX has not started yet/);
});

test('with the panel open an idle kernel is asked nothing', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'panel_live.ipynb');
  const panel = await openPanel(page);
  await runCell(page, LOAD);
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText(/^JAX has not started yet/);
  await waitForKernelIdle(page);
  await page.waitForTimeout(500); // the load cell's own push and its answer
  await countCommMessagesSent(page);
  // At the old 2 s poll this window held three snapshot requests.
  await page.waitForTimeout(6500);
  expect(await commMessagesSent(page)).toBe(0);
  // A cell still brings a fresh state.
  await runCell(page, START_JAX);
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText('JAX started on cpu');
  expect(await commMessagesSent(page)).toBe(1);
});

test('restart asks first, listing the settings; status then names their source "notebook settings"', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'panel_live.ipynb');
  const panel = await openPanel(page);
  await panel.locator('select[name="preallocate"]').selectOption('off');
  await panel.locator('input[name="fraction"]').fill('30%');
  const restart = panel.getByRole('button', { name: 'Restart kernel with these settings' });
  await restart.click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Restart Kernel with These Settings?');
  await expect(dialog.locator('tr', { hasText: 'preallocate' })).toContainText('off');
  await expect(dialog.locator('tr', { hasText: 'fraction' })).toContainText('0.3');
  await expect(dialog.locator('tr', { hasText: 'allocator' })).toContainText('JAX default');
  await page.locator('.jp-Dialog-content').screenshot({ path: path.join(IMAGES_DIR, 'panel-restart-dialog.png') });
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await expect(dialog).toHaveCount(0);
  expect(await notebookMetadata(page)).toBeNull(); // cancelled: nothing written, no restart

  await withKernelRestart(page, async () => {
    await restart.click();
    await page.locator('.jp-Dialog .jp-mod-accept').click();
  });
  await runCell(page, LOAD);
  const settings = panel.locator('.jp-GpuMem-settingsInEffect');
  await expect(settings.locator('tr', { hasText: 'preallocate' })).toContainText('off (notebook settings)');
  await expect(settings.locator('tr', { hasText: 'fraction' })).toContainText('0.3 (notebook settings)');
  // As %gpumem status reads them: "not set", never null or false.
  await expect(settings.locator('tr', { hasText: 'async-prealloc' })).toContainText('not set (JAX default)');
  await expect(settings).not.toContainText(/\b(null|false|true)\b/);
  await runCell(page, STATUS);
  const status = cellOutput(page, STATUS);
  await expect(status.locator('tr', { hasText: 'preallocate' })).toContainText('notebook settings');
  await expect(status.locator('tr', { hasText: 'preallocate' })).not.toContainText('%gpumem');
});

test("Save to notebook saves the file; the fraction takes 30%; the allocators are what the kernel's JAX accepts", async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'panel_live.ipynb');
  const panel = await openPanel(page);
  await runCell(page, LOAD);
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText(/^JAX has not started yet/);
  // JAX 0.10's option generator takes these (kernel_comm's allocator_choices), vmm among them.
  await expect(panel.locator('select[name="allocator"] option')).toHaveText(
    ['not set', 'default', 'bfc', 'platform', 'cuda_async', 'vmm']
  );
  await panel.locator('input[name="fraction"]').fill('30%');
  await panel.locator('select[name="allocator"]').selectOption('vmm');
  await panel.getByRole('button', { name: 'Save to notebook' }).click();
  const want = { preallocate: null, fraction: 0.3, allocator: 'vmm' };
  await expect.poll(() => savedMetadata(page, `${tmpPath}/panel_live.ipynb`)).toEqual(want);
  // Saved, not only changed: the document is clean once the save returns.
  await expect.poll(() => page.evaluate(() => (window as any).jupyterapp.shell.currentWidget.context.model.dirty)).toBe(false);
});

test('a fraction set by %gpumem in a cell is in effect, and the form below speaks of the notebook, not of JAX defaults', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'panel_live.ipynb');
  const panel = await openPanel(page);
  await runCell(page, LOAD);
  await page.notebook.setCell(SLEEP, 'code', '%gpumem fraction 0.5');
  await runCell(page, SLEEP);
  const inEffect = panel.locator('.jp-GpuMem-settingsInEffect tr', { hasText: 'fraction' });
  await expect(inEffect).toContainText('0.5 (%gpumem)');
  // The notebook sets no fraction: the form says so, and what it holds, instead of "JAX default
  // (0.75)" under a fraction of 0.5.
  const form = panel.locator('.jp-GpuMem-form');
  await expect(form.locator('input[name="fraction"]')).toHaveAttribute('placeholder', 'not set');
  await expect(form.locator('.jp-GpuMem-formHint')).toHaveText(
    "Saved in the notebook and applied when its kernel starts. Not set: JAX's default, unless a cell sets it."
  );
  await expect(form).not.toContainText('JAX default');
  await panel.locator('.jp-GpuMem-notebook').first().screenshot({ path: path.join(IMAGES_DIR, 'panel-settings-form.png') });
});

test("the kernels table shows each idle kernel's idle time and the prealloc column, and shuts one down after asking", async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'world_kernel.ipynb');
  await runCell(page, 0); // this kernel takes 6 GiB of fake GPU 1
  const panel = await openPanel(page);
  const row = panel.locator('tr.jp-GpuMem-thisKernel');
  await expect(row).toContainText('world_kernel.ipynb');
  await expect(row.locator('.jp-GpuMem-idle')).toContainText(/idle \d+ (s|min)/);
  // At the sidebar's default width the name stays on one line and no header runs into the next
  // ("NotebooGPU"); the prealloc answer sits under the name, in view.
  await expect(row.locator('.jp-GpuMem-kernelGpu')).toHaveText('GPU 1');
  const name = row.locator('.jp-GpuMem-kernelName');
  await expect(name).toHaveText('world_kernel.ipynb');
  const lineHeight = await name.evaluate(el => parseFloat(getComputedStyle(el).lineHeight) || 18);
  expect((await name.boundingBox())!.height).toBeLessThan(1.5 * lineHeight);
  const headersFit = await panel
    .locator('.jp-GpuMem-kernels th')
    .evaluateAll(ths => ths.every(th => th.scrollWidth <= th.clientWidth));
  expect(headersFit).toBe(true);
  const prealloc = row.locator('.jp-GpuMem-prealloc');
  await expect(prealloc).toHaveText(/^prealloc (yes|no|unknown)$/);
  const [box, panelBox] = [await prealloc.boundingBox(), await panel.boundingBox()];
  expect(box && panelBox && box.x + box.width <= panelBox.x + panelBox.width).toBe(true);
  const scroller = panel.locator('.jp-GpuMem-scrollX');
  expect(await scroller.evaluate(el => el.scrollWidth <= el.clientWidth)).toBe(true);
  expect(await panel.innerText()).not.toContain(tmpPath);
  await panel.locator('.jp-GpuMem-kernels').screenshot({ path: path.join(IMAGES_DIR, 'panel-idle-kernels.png') });

  await row.getByRole('button', { name: 'Shut down' }).click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Shut Down Kernel?');
  await expect(dialog).toContainText(/It holds 6\.00 GiB on GPU 1 and has been idle for \d+ (s|min)\./);
  await page.locator('.jp-Dialog .jp-mod-accept').click();
  await page.waitForFunction(() => {
    const kernel = (window as any).jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;
    return !kernel || kernel.status === 'dead';
  });
  await expect(row).toHaveCount(0);
});

test('the idle time counts up while the panel is open, with no new reading', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'world_kernel.ipynb');
  await runCell(page, 0); // this kernel takes 6 GiB of fake GPU 1; the world then stays still
  const panel = await openPanel(page);
  const idle = panel.locator('tr.jp-GpuMem-thisKernel .jp-GpuMem-idle');
  await expect(idle).toContainText(/idle \d+ s/);
  const seconds = async () => Number(/idle (\d+) s/.exec((await idle.innerText()) ?? '')?.[1] ?? -1);
  // The server pushes a reading only when it changes (a kernel's activity resets its idle time):
  // with the world still, the table must count on its own. It stopped at 0 to 1 s before.
  await expect.poll(seconds, { timeout: 20000 }).toBeGreaterThanOrEqual(6);
});

test('a variable set with %env after JAX started shows what JAX read, and the change as not in effect', async ({ page, tmpPath }) => {
  // notebooks/panel_late_env.ipynb: 0 loads jupyter_gpumem, 1 starts JAX (on the CPU here),
  // 2 sets the fraction with %env, 3 is %gpumem status.
  await openNotebook(page, tmpPath, 'panel_late_env.ipynb');
  const panel = await openPanel(page);
  for (const cell of [0, 1, 2]) {
    await runCell(page, cell);
  }
  const settings = panel.locator('.jp-GpuMem-settingsInEffect');
  const fraction = settings.locator('tr', { hasText: 'fraction' });
  await expect(fraction).toContainText('0.75 (JAX default)');
  const late = fraction.locator('.jp-GpuMem-lateSetting');
  await expect(late).toHaveText("⚠ '.3' in cell [3]: not in effect until a restart");
  await expect(late).toHaveAttribute('title', /^XLA_PYTHON_CLIENT_MEM_FRACTION was changed after JAX started/);
  await expect(settings.locator('tr', { hasText: 'preallocate' }).locator('.jp-GpuMem-lateSetting')).toHaveCount(0);
  await panel.locator('.jp-GpuMem-notebook').first().screenshot({ path: path.join(IMAGES_DIR, 'panel-late-setting.png') });
  await runCell(page, 3);
  const status = cellOutput(page, 3);
  await expect(status.locator('tr', { hasText: 'fraction' })).toContainText('0.75');
  await expect(status.locator('tr', { hasText: 'fraction' })).toContainText('changed in cell [3], not in effect');
});
