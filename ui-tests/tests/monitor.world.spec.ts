/**
 * The live monitor (%gpumem monitor) on the fake three-GPU world (synthetic readings): its
 * time axis reads clock times and starts at its first sample, it says it is synthetic, it
 * follows JupyterLab's theme, it draws a named marker added while it runs, a page reloaded
 * draws every live monitor and says a stopped one ended, and closing its notebook after the
 * kernel stopped is quiet.
 */
import * as path from 'path';
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import { expectNoTestFolderShown, IMAGES_DIR, openNotebook, waitForKernelIdle } from './gpumem';
import { runCell } from './panelSteps';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1100 } });

const MONITOR = '.jupyter-gpumem-monitor';
const PLOT = `${MONITOR} .js-plotly-plot`;

/** Runs the notebook's cells up to the monitor's and waits until it has drawn `points`. */
async function startMonitor(
  page: IJupyterLabPageFixture,
  tmpPath: string,
  points = 3,
  notebook = 'monitor_world.ipynb'
): Promise<void> {
  await openNotebook(page, tmpPath, notebook);
  await page.notebook.runCell(1, true); // %load_ext and a cell that ends before the monitor starts
  await page.notebook.runCell(2, true); // %gpumem monitor --interval 1
  await expect(page.locator(PLOT).first()).toBeVisible({ timeout: 60000 });
  await page.waitForFunction(
    ([sel, n]) => {
      const gd: any = document.querySelector(sel as string);
      return gd?.data?.length > 0 && gd.data[0].x.length >= (n as number);
    },
    [PLOT, points] as const,
    { timeout: 30000 }
  );
}

/** The first plot's background as plotly painted it, and its relative luminance (0..1). */
function background(page: IJupyterLabPageFixture): Promise<{ color: string; luminance: number }> {
  return page.locator(PLOT).first().evaluate((gd: any) => {
    const color = getComputedStyle(gd.querySelector('.main-svg')).backgroundColor;
    const [r, g, b] = (/(\d+), (\d+), (\d+)/.exec(color) ?? ['', '255', '255', '255'])
      .slice(1)
      .map(v => {
        const c = Number(v) / 255;
        return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
      });
    return { color, luminance: 0.2126 * r + 0.7152 * g + 0.0722 * b };
  });
}

test('the live monitor reads clock times from its first sample on, and says it is synthetic', async ({
  page,
  tmpPath
}) => {
  await startMonitor(page, tmpPath);
  await page.notebook.runCell(3, true); // a cell after the first sample: its marker is drawn
  const plot = page.locator(PLOT).first();
  await page.waitForFunction(
    sel => {
      const gd: any = document.querySelector(sel);
      const cells = gd?.data?.find((t: any) => t.meta === 'cells');
      return cells && cells.x.some((x: any) => x !== null);
    },
    PLOT,
    { timeout: 30000 }
  );
  const axis = await plot.evaluate((gd: any) => {
    const xa = gd._fullLayout.xaxis;
    const bands = gd.data.filter((t: any) => t.meta !== 'cells');
    const first = Math.min(...bands.map((t: any) => Math.min(...t.x)));
    const cells = gd.data.find((t: any) => t.meta === 'cells').x.filter((x: any) => x !== null);
    return {
      first,
      start: xa.r2l(xa.range[0]),
      cells,
      ticks: Array.from(gd.querySelectorAll('.xtick text')).map((t: any) => t.textContent)
    };
  });
  expect(axis.ticks.length).toBeGreaterThan(1);
  for (const tick of axis.ticks) {
    expect(tick).toMatch(/^\d{2}:\d{2}:\d{2}$/);
  }
  expect(Math.abs(axis.start - axis.first)).toBeLessThan(500);
  // Only the cell run after the first sample is marked (its start and end: 2 points).
  expect(axis.cells.length).toBe(2);
  expect(Math.min(...axis.cells)).toBeGreaterThanOrEqual(axis.first);

  const monitor = page.locator(MONITOR);
  await expect(monitor.locator('.jupyter-gpumem-header')).toContainText('SYNTHETIC');
  await expect(monitor.locator('.jupyter-gpumem-header')).not.toContainText('REPLAY');
  await expect(plot.locator('.annotation-text')).toHaveText('SYNTHETIC');
  await expect(monitor.locator('details summary').first()).toContainText('preallocate on · fraction');
  expect((await background(page)).luminance).toBeGreaterThan(0.9);
  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-live-light.png') });

  // A GPU's plot drawn in a hidden tab takes the full width once its tab is shown.
  const width = await plot.evaluate((gd: any) => gd.getBoundingClientRect().width);
  await monitor.getByRole('tab', { name: /GPU 1/ }).click();
  const second = monitor.locator('.js-plotly-plot').nth(1);
  await expect(second).toBeVisible();
  await expect
    .poll(() => second.evaluate((gd: any) => gd.querySelector('.main-svg').getBoundingClientRect().width))
    .toBeGreaterThan(width - 20);
});

test('a named marker a cell adds with record.mark is drawn live, its markup shown as text and its label cut', async ({
  page,
  tmpPath
}) => {
  await startMonitor(page, tmpPath, 3, 'monitor_world_marker.ipynb');
  await page.notebook.runCell(3, true); // mark("<b>step</b> & a name long enough to be cut short")
  const plot = page.locator(PLOT).first();
  // The plot's label, then the marker's: its first 23 characters and "…", the tags as text (no
  // bold), sent by the kernel at the monitor's next update.
  const annotation = plot.locator('.annotation-text');
  await expect(annotation).toHaveText(['SYNTHETIC', '<b>step</b> & a name lo…'], { timeout: 30000 });
  expect(await annotation.nth(1).locator('b, [style*="bold"]').count()).toBe(0);
  await expect(plot.locator('.legend .legendtext').last()).toHaveText('markers');
  await annotation.nth(1).hover();
  await expect(plot.locator('.hoverlayer')).toContainText('<b>step</b> & a name long enough to be cut short');
});

test('in JupyterLab Dark the monitor is drawn on a dark background, and follows a theme switch', async ({
  page,
  tmpPath
}) => {
  await startMonitor(page, tmpPath);
  expect((await background(page)).luminance).toBeGreaterThan(0.9);
  await page.theme.setDarkTheme();
  await expect.poll(async () => (await background(page)).luminance, { timeout: 15000 }).toBeLessThan(0.1);
  const text = await page
    .locator(PLOT)
    .first()
    .evaluate((gd: any) => getComputedStyle(gd.querySelector('.xtick text')).fill);
  expect(text).not.toBe('rgb(68, 68, 68)'); // plotly's default dark grey would not read on it
  await page.locator(MONITOR).screenshot({ path: path.join(IMAGES_DIR, 'monitor-live-dark.png') });
  await page.theme.setLightTheme();
  await expect.poll(async () => (await background(page)).luminance, { timeout: 15000 }).toBeGreaterThan(0.9);
});

test('while the monitor draws, the browser sends the kernel nothing: it stays Idle', async ({ page, tmpPath }) => {
  await startMonitor(page, tmpPath);
  const count = () => page.locator(PLOT).first().evaluate((gd: any) => gd.data[0].x.length);
  await page.evaluate(() => {
    const w = window as any;
    w.__gpumemBusy = 0;
    w.jupyterapp.shell.currentWidget.sessionContext.session.kernel.statusChanged.connect((_: unknown, s: string) => {
      if (s === 'busy') {
        w.__gpumemBusy += 1;
      }
    });
  });
  const start = await count();
  await expect.poll(count, { timeout: 30000 }).toBeGreaterThanOrEqual(start + 3);
  expect(await page.evaluate(() => (window as any).__gpumemBusy)).toBe(0);
});

test('a page reloaded draws the monitor again with every reading so far, and it goes on', async ({
  page,
  tmpPath
}) => {
  test.setTimeout(180000); // a reload builds JupyterLab again: over a minute on a loaded machine
  await startMonitor(page, tmpPath, 4);
  const count = () =>
    page.locator(PLOT).first().evaluate((gd: any) => (gd.data && gd.data.length ? gd.data[0].x.length : 0));
  const before = await count();
  await page.notebook.save(); // the output that names the widget, for the notebook reopened
  // A plain reload: galata's page.reload() timed out here in its own readiness wait.
  await page.evaluate(() => window.location.reload());
  await page.waitForFunction(() => (window as any).jupyterapp?.shell, null, { timeout: 60000 });
  await expect(page.locator(PLOT).first()).toBeVisible({ timeout: 60000 });
  // The figure the kernel gives on reload holds the readings sent as messages since.
  await expect.poll(count, { timeout: 30000 }).toBeGreaterThanOrEqual(before);
  const after = await count();
  await expect.poll(count, { timeout: 30000 }).toBeGreaterThan(after);
});

/** For each plot of `monitor` that is in view (a hidden tab's is not), whether it drew readings. */
function readingsInView(monitor: Locator): Promise<boolean[]> {
  return monitor.evaluate(root =>
    [...root.querySelectorAll('.js-plotly-plot')]
      .filter((gd: any) => gd.offsetWidth > 0)
      .map((gd: any) => gd.data?.length > 0 && gd.data[0].x.length > 0)
  );
}

test('a page reloaded after several monitors ran draws each live one on every tab and says the stopped one ended', async ({
  page,
  tmpPath
}, testInfo) => {
  test.setTimeout(240000); // three monitors, then a reload that builds JupyterLab again
  const console_: string[] = [];
  page.on('console', msg => console_.push(`${msg.type()}: ${msg.text()}`));
  await openNotebook(page, tmpPath, 'monitor_world_several.ipynb');
  await page.notebook.runCell(1, true); // %load_ext
  for (const cell of [2, 3, 4, 2, 5]) {
    // a monitor, a second, a third; the first cell run again (its old monitor closes); the third stopped
    await page.notebook.runCell(cell, true);
  }
  const cells = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell');
  await expect(cells.nth(4).locator(MONITOR)).toHaveCount(0, { timeout: 30000 });
  await expect(cells.nth(4).locator("img[src*='jupyter-gpumem-still']")).toBeVisible();
  await page.notebook.save();
  const fromReload = console_.length;
  await page.evaluate(() => window.location.reload());
  await page.waitForFunction(() => (window as any).jupyterapp?.shell, null, { timeout: 60000 });

  for (const cell of [2, 3]) {
    const monitor = cells.nth(cell).locator(MONITOR);
    await expect(monitor).toHaveCount(1, { timeout: 60000 });
    const tabs = monitor.locator('.jupyter-gpumem-tabs .lm-TabBar-tab');
    await expect(tabs).toHaveCount(3, { timeout: 30000 });
    for (let tab = 0; tab < 3; tab++) {
      await tabs.nth(tab).click();
      // The tab's plot is drawn: one plot in view, with readings.
      await expect.poll(() => readingsInView(monitor), { timeout: 30000 }).toEqual([true]);
    }
  }
  // The stopped monitor's output says it ended, and its still is shown; no widget is missing.
  const stopped = cells.nth(4).locator('.jp-OutputArea');
  await expect(stopped.locator('.jupyter-gpumem-ended')).toContainText('this monitor has stopped');
  await expect(stopped.locator("img[src*='jupyter-gpumem-still']")).toBeVisible();
  await expect(page.locator('.jp-Notebook')).not.toContainText('Error displaying widget');
  await cells.nth(4).screenshot({ path: testInfo.outputPath('stopped-after-reload.png') });
  await cells.nth(3).screenshot({ path: testInfo.outputPath('live-after-reload.png') });
  const after = console_.slice(fromReload);
  expect(after.filter(line => line.includes('widget model not found') || line.includes('Could not create a view'))).toEqual([]);
});

test('closing the notebook after its kernel shut down logs no widget errors', async ({ page, tmpPath }) => {
  const console_: string[] = [];
  page.on('console', msg => console_.push(`${msg.type()}: ${msg.text()}`));
  await startMonitor(page, tmpPath);
  await page.evaluate(async () => {
    const app = (window as any).jupyterapp;
    await app.shell.currentWidget.sessionContext.shutdown();
  });
  await page.waitForFunction(() => {
    const ctx = (window as any).jupyterapp.shell.currentWidget?.sessionContext;
    return ctx && !ctx.session;
  });
  await page.notebook.close(true);
  await expect(page.locator('.jp-NotebookPanel')).toHaveCount(0);
  // Anything the closing views would send goes out as they are disposed; give it a moment.
  await page.waitForTimeout(2000);
  expect(console_.filter(line => line.includes('Could not send widget sync message'))).toEqual([]);
  expect(console_.filter(line => line.startsWith('error:'))).toEqual([]);
});

test('the quickstart, on GPUs where JAX runs on the CPU, says its live monitor draws them and the CPU view, and its checks pass', async ({
  page,
  tmpPath
}) => {
  test.setTimeout(180000);
  const name = 'quickstart.ipynb';
  await page.contents.uploadFile(path.resolve(__dirname, '..', '..', 'notebooks', name), `${tmpPath}/${name}`);
  await page.notebook.openByPath(`${tmpPath}/${name}`);
  await page.notebook.activate(name);
  await waitForKernelIdle(page);
  await page.evaluate(() => (window as any).jupyterapp.commands.execute('editmenu:clear-all'));
  // From the model: JupyterLab renders a long notebook's cells only as they scroll into view.
  const count = await page.evaluate(() => (window as any).jupyterapp.shell.currentWidget.content.model.cells.length);
  for (let i = 0; i < count; i++) {
    await runCell(page, i); // one by one: the late-fraction cell fails on purpose
  }
  const cell = (source: string) =>
    page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell').filter({ hasText: source });
  const said = cell('The live monitor above draws GPUs');
  await said.scrollIntoViewIfNeeded();
  await expect(said.locator('.jp-OutputArea-output').first()).toHaveText(
    "The live monitor above draws GPUs 0, 1, 2 as NVML reads them; JAX runs on the CPU here, so none of it is JAX's.\n" +
      'JAX runs on the CPU here: the live monitor above draws its live arrays in host memory. Its header:\n'
  );
  // The header shown below it: the CPU view beside the GPUs'.
  await expect(said.locator('.jp-OutputArea-output').nth(1)).toContainText('CPU: JAX arrays: ');
  // The check cell is collapsed for the learner (its source hidden), so it is read from the model.
  const checkOutputs = await page.evaluate(() => {
    const cells = (window as any).jupyterapp.shell.currentWidget.content.model.cells;
    const found: [number, boolean][] = [];
    for (let i = 0; i < cells.length; i++) {
      const c = cells.get(i);
      if (c.type === 'code' && c.sharedModel.getSource().includes('the live monitor never updated')) {
        found.push([c.outputs.length, c.executionCount !== null]); // ran, and printed no error
      }
    }
    return found;
  });
  expect(checkOutputs).toEqual([[0, true]]);
});

test('on the fake world the GPU views are marked synthetic, the CPU view of real JAX arrays is not, and every tab title fits', async ({
  page,
  tmpPath
}) => {
  await page.setViewportSize({ width: 1280, height: 1500 }); // the whole monitor in its screenshot
  await openNotebook(page, tmpPath, 'monitor_world_cpu.ipynb');
  await page.notebook.runCell(1, true); // JAX starts on the CPU and holds 16 MiB
  await page.notebook.runCell(2, true); // %gpumem monitor --interval 1
  const monitor = page.locator(MONITOR);
  const cpuTab = monitor.getByRole('tab', { name: 'CPU: JAX arrays' });
  await expect(cpuTab).toBeVisible({ timeout: 60000 });
  // It opens where this kernel's JAX runs: the CPU's tab, not GPU 0's.
  await expect(cpuTab).toHaveAttribute('aria-selected', 'true');

  // Every tab's title is drawn whole: each label is as wide as its text (ipywidgets' 144 px tabs
  // cut "GPU 0: NVIDIA A100-SXM4-40GB" to "GPU 0: NVIDIA A100").
  const labels = monitor.locator('.lm-TabBar-tabLabel');
  await expect(labels).toHaveText([
    'GPU 0: NVIDIA A100-SXM4-40GB',
    'GPU 1: NVIDIA A100-SXM4-40GB',
    'GPU 2: NVIDIA A100-SXM4-40GB',
    'CPU: JAX arrays'
  ]);
  const cut = await labels.evaluateAll((els: HTMLElement[]) =>
    els.filter(el => el.scrollWidth > el.clientWidth).map(el => el.textContent)
  );
  expect(cut).toEqual([]);

  // The header: the GPU lines carry SYNTHETIC, the CPU line and the title (shared by all) do not.
  const lines = monitor.locator('.jupyter-gpumem-header > div');
  await expect(lines.first()).toContainText('GPU memory');
  await expect(lines.first()).not.toContainText('SYNTHETIC');
  for (const gpu of ['GPU 0: ', 'GPU 1: ', 'GPU 2: ']) {
    await expect(lines.filter({ hasText: gpu })).toContainText('SYNTHETIC');
  }
  const cpuLine = lines.filter({ hasText: 'CPU: JAX arrays:' });
  await expect(cpuLine).toContainText("16.00 MiB in 1 live array, in host memory (not a GPU's)", { timeout: 30000 });
  await expect(cpuLine).not.toContainText('SYNTHETIC');
  // Host memory is said once (the GPU lines' "host pids" are NVML's pids, not memory).
  const said = await monitor.locator('.jupyter-gpumem-header').innerText();
  expect(said.match(/host('s)? memory/g)).toEqual(['host memory']);

  // The plots: GPU 0's is labelled SYNTHETIC; the CPU view's, under its heading, has no label.
  await expect(monitor.locator('.js-plotly-plot').first().locator('.annotation-text')).toHaveText('SYNTHETIC');
  await cpuTab.click();
  const heading = monitor.locator('.jupyter-gpumem-view-heading');
  await expect(heading).toBeVisible();
  await expect(heading).toHaveText(
    "JAX's live arrays on the CPU, in the host's memory (not a GPU's): their shapes times their dtypes' sizes, summed. The process's other memory is not drawn."
  );
  const cpuPlot = monitor.locator('.js-plotly-plot').nth(3);
  await expect(cpuPlot).toBeVisible();
  // Its one band is named in a legend, which also keeps room for the clock times below the plot.
  await expect(cpuPlot.locator('.legendtext').first()).toHaveText('JAX live arrays (CPU)');
  await expect(cpuPlot.locator('.annotation-text')).toHaveCount(0);
  await expectNoTestFolderShown(monitor, tmpPath);
  await monitor.screenshot({ path: path.join(IMAGES_DIR, 'monitor-world-cpu.png') });
});
