/**
 * The panel against this machine as it is: no GPU, no NVIDIA driver.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';

import {
  IMAGES_DIR,
  kernelAllocatorChoices,
  kernelLoadState,
  NO_KERNEL_TRACKER,
  notebookMetadata,
  openNotebook,
  openPanel,
  runFirstCell,
  serveDevices,
  setNotebookMetadata,
  withKernelRestart
} from './gpumem';

test.use({ autoGoto: true, ...NO_KERNEL_TRACKER });

test('the panel opens from its sidebar tab and explains that there is no GPU', async ({ page }) => {
  const panel = await openPanel(page);
  const notice = panel.locator('.jp-GpuMem-notice').first();
  await expect(notice).toContainText(/No GPU here|NVML is not available/);
  await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(0);
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-no-gpu.png') });
});

test.describe('readings served by the test', () => {
  test.use({ autoGoto: false });

  test('a GPU that cannot be read says why and shows no byte counts', async ({ page }) => {
    const GiB = 1024 ** 3;
    const common = { pids_visible: true, pids_reason: null, this_kernel_bytes: 0, kernels_bytes: 0, other_bytes: 0, processes: [] };
    // The shape the server sends for a lost GPU (docs/server.md): null numbers and a reason.
    const reply = {
      t: 0, source: 'nvml', synthetic: false, state: 'ok', reason: null, poll_interval: 2, warnings: [],
      devices: [
        { ...common, index: 0, name: 'NVIDIA A100-SXM4-40GB', uuid: 'GPU-0', total: 40 * GiB, used: GiB,
          free: 39 * GiB, utilization: 5, display_active: false, mig: false, readable: true, reason: null },
        { ...common, index: 1, name: null, uuid: null, total: null, used: null, free: null,
          utilization: null, display_active: null, mig: null, readable: false, reason: 'GPU is lost',
          pids_visible: false, pids_reason: 'the device cannot be read' }
      ]
    };
    await serveDevices(page, reply);
    await page.goto();
    const panel = await openPanel(page);
    await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(2);
    const lost = panel.locator('.jp-GpuMem-card[data-device="1"]');
    await expect(lost).toContainText('GPU 1');
    await expect(lost).toContainText('Cannot be read: GPU is lost');
    await expect(lost).not.toContainText(/\d (B|KiB|MiB|GiB|TiB)\b/);
    await expect(lost.locator('.jp-GpuMem-bar')).toHaveCount(0);
    await expect(panel.locator('.jp-GpuMem-card[data-device="0"]')).toContainText('1.00 GiB / 40.0 GiB');
  });

  test('in a container, host pids are one band on each card and their reason is said once, folded', async ({ page }) => {
    const GiB = 1024 ** 3;
    // NVML lists the host's pids inside a container (NVIDIA/nvidia-docker#1483): the server cannot
    // tell which of them, if any, is a kernel, and gives every such GPU one reason (docs/server.md).
    const why = 'NVML lists pids that are not processes in this server\'s PID namespace';
    const hostPid = (pid: number, used: number) => ({
      pid, used, kind: 'host_pid', kernel_id: null, kernel_name: null, notebook_path: null,
      execution_state: null, preallocated: null, name: null, user: null
    });
    const card = (index: number, used: number, hostPids: ReturnType<typeof hostPid>[]) => ({
      index, name: 'NVIDIA A100-SXM4-40GB', uuid: `GPU-${index}`, total: 40 * GiB, used,
      free: 40 * GiB - used, utilization: 20, display_active: false, mig: false, readable: true, reason: null,
      pids_visible: false, pids_reason: why, this_kernel_bytes: 0, kernels_bytes: 0, other_bytes: 0,
      host_pid_bytes: hostPids.reduce((sum, p) => sum + p.used, 0), processes: hostPids
    });
    const reply = {
      t: 0, source: 'nvml', synthetic: false, state: 'ok', reason: null, poll_interval: 2, warnings: [],
      devices: [
        card(0, 18.5 * GiB, [hostPid(4201002, 12 * GiB), hostPid(4201003, 6 * GiB)]),
        card(1, 10 * GiB, [hostPid(4201004, 10 * GiB)])
      ]
    };
    await serveDevices(page, reply);
    await page.goto();
    const panel = await openPanel(page);
    const gpu0 = panel.locator('.jp-GpuMem-card[data-device="0"]');
    // One name for the band, and nothing of the reason on the cards.
    await expect(gpu0.locator('.jp-GpuMem-legend')).toContainText('host pids 18.0 GiB');
    await expect(gpu0.locator('.jp-GpuMem-legend')).toContainText('other processes 512 MiB');
    await expect(panel.locator('.jp-GpuMem-card', { hasText: 'PID namespace' })).toHaveCount(0);
    await expect(panel.locator('.jp-GpuMem-card', { hasText: 'not visible' })).toHaveCount(0);
    // Said once for both GPUs, one line until clicked.
    const note = panel.locator('.jp-GpuMem-hostPids');
    await expect(note).toHaveCount(1);
    await expect(note.locator('summary')).toHaveText('GPUs 0, 1: host pids, which may be kernels of this server');
    await expect(note.getByText(why)).toBeHidden();
    await note.locator('summary').click();
    await expect(note.getByText(why)).toBeVisible();
    await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-host-pids.png') });
  });
});

test('without the extension loaded the kernel section offers to load it', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb');
  const panel = await openPanel(page);
  const notice = panel.locator('.jp-GpuMem-notice', { hasText: 'not loaded' });
  await expect(notice).toContainText('jupyter_gpumem is not loaded in this kernel');
  await expect(notice).toContainText('Loading does not start JAX.');
  await expect(notice.locator('.jp-GpuMem-load')).toHaveText('Load jupyter_gpumem');
  expect(await kernelLoadState(page)).toEqual({ loaded: false, jaxStarted: false });
  // The offer does what it says: the kernel has the extension, JAX has not started, and the
  // panel reads the kernel instead of offering again.
  await notice.locator('.jp-GpuMem-load').click();
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText('JAX has not started yet; readings begin when it does');
  await expect(notice).toHaveCount(0);
  expect(await kernelLoadState(page)).toEqual({ loaded: true, jaxStarted: false });
});

test('once loaded, JAX on CPU shows its backend, settings with sources, and why there are no statistics', async ({ page, tmpPath }) => {
  // The notebook's metadata turns preallocation off; the kernel start hook applies it.
  await openNotebook(page, tmpPath, 'jax_cpu.ipynb');
  const panel = await openPanel(page);
  await panel.locator('.jp-GpuMem-load').click();
  const backend = panel.locator('.jp-GpuMem-backend');
  await expect(backend).toContainText('JAX has not started yet');
  await runFirstCell(page);
  // The panel refreshes by itself while visible: no click after the cell.
  await expect(backend).toHaveText('JAX started on cpu');
  const settings = panel.locator('.jp-GpuMem-settingsInEffect');
  // Applied by the panel at kernel start, from the notebook's metadata: no magic was typed.
  await expect(settings.locator('tr', { hasText: 'preallocate' })).toContainText('off (notebook settings)');
  await expect(settings.locator('tr', { hasText: 'fraction' })).toContainText('0.75 (JAX default)');
  await expect(panel.locator('.jp-GpuMem-noStats')).toContainText(
    'JAX is running on the CPU, which keeps no allocator statistics'
  );
  await expect(panel.locator('.jp-GpuMem-allocator th', { hasText: 'in use' })).toHaveCount(0);
  await panel.screenshot({ path: path.join(IMAGES_DIR, 'panel-jax-cpu.png') });
});

test('the settings form writes the notebook metadata, keeping its allocator', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb');
  await setNotebookMetadata(page, { allocator: 'platform' });
  const panel = await openPanel(page);
  // No list from the kernel yet: the notebook's own allocator is still on offer.
  await expect(panel.locator('select[name="allocator"]')).toHaveValue('platform');
  await panel.locator('select[name="preallocate"]').selectOption('off');
  await panel.locator('input[name="fraction"]').fill('0.3');
  await panel.getByRole('button', { name: 'Save to notebook' }).click();
  expect(await notebookMetadata(page)).toEqual({
    preallocate: false,
    fraction: 0.3,
    allocator: 'platform'
  });
});

test('the allocators on offer are the ones the kernel reports', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb');
  const panel = await openPanel(page);
  const options = panel.locator('select[name="allocator"] option');
  const hint = panel.locator('.jp-GpuMem-choicesHint');
  // Before the kernel answers, only "not set", and why.
  await expect(options).toHaveText(['not set']);
  await expect(hint).toContainText('The list of allocators comes from the kernel');
  await panel.locator('.jp-GpuMem-load').click();
  await expect(panel.locator('.jp-GpuMem-backend')).toContainText('JAX has not started yet');
  const choices = await kernelAllocatorChoices(page);
  await expect(options).toHaveText(['not set', ...(choices ?? [])]);
  if (choices === null) {
    await expect(hint).toContainText('does not say which allocators it accepts');
  } else {
    await expect(hint).toHaveCount(0);
  }
});

test('a fraction above 1 is refused by the form and nothing is written', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb');
  const panel = await openPanel(page);
  await panel.locator('input[name="fraction"]').fill('1.5');
  await expect(panel.locator('.jp-GpuMem-error')).toContainText('0 < fraction <= 1');
  await expect(panel.getByRole('button', { name: 'Save to notebook' })).toBeDisabled();
  expect(await notebookMetadata(page)).toBeNull();
});

test('restart with these settings restarts the kernel in place with their environment', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb');
  const panel = await openPanel(page);
  await panel.locator('select[name="preallocate"]').selectOption('off');
  await panel.locator('input[name="fraction"]').fill('0.3');
  await withKernelRestart(page, async () => {
    await panel.getByRole('button', { name: 'Restart kernel with these settings' }).click();
    await page.locator('.jp-Dialog .jp-mod-accept').click();
  });
  const output = await runFirstCell(page);
  await expect(output).toContainText("('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')");
  await expect(output).toContainText(/MEM_FRACTION', '0\.3'/);
  await page.screenshot({ path: path.join(IMAGES_DIR, 'panel-settings.png') });
});

test('a restart from the Kernel menu applies the saved settings again', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, 'xla_env.ipynb');
  await setNotebookMetadata(page, { allocator: 'platform' });
  await withKernelRestart(page, async () => {
    await page.menu.clickMenuItem('Kernel>Restart Kernel…');
    await page.locator('.jp-Dialog .jp-mod-accept').click();
  });
  const output = await runFirstCell(page);
  await expect(output).toContainText("('XLA_PYTHON_CLIENT_ALLOCATOR', 'platform')");
});
