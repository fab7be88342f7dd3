/**
 * axe-core (pinned in package.json) on the whole page, with the panel open beside a drawn monitor
 * on the fake three-GPU world (synthetic): no violation may come from the extension's own
 * elements (the panel, the monitor, the status bar item). JupyterLab's own are not counted here.
 */
import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '@jupyterlab/galata';

import { openNotebook, openPanel, PANEL_ID } from './gpumem';

test.use({ autoGoto: true });

const OURS = `#${PANEL_ID}, .jupyter-gpumem-monitor, .jp-GpuMem-status`;

test('axe-core finds nothing on the panel, the status bar item or a drawn monitor', async ({ page, tmpPath }) => {
  test.setTimeout(180000); // a whole-page analysis of JupyterLab takes tens of seconds here
  await openNotebook(page, tmpPath, 'monitor_world_cpu.ipynb');
  await page.notebook.runCell(1, true); // JAX starts on the CPU
  await page.notebook.runCell(2, true); // %gpumem monitor --interval 1
  const monitor = page.locator('.jupyter-gpumem-monitor');
  await expect(monitor.locator('.js-plotly-plot:visible')).toHaveCount(1, { timeout: 60000 });
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(3);
  await expect(panel.locator('.jp-GpuMem-backend')).toHaveText('JAX started on cpu');

  const found = await new AxeBuilder({ page }).analyze();
  const flagged = found.violations.flatMap(v => v.nodes.map(node => [v.id, node.target.join(' ')]));
  const ours = await page.evaluate(
    ([all, o]) => all.filter(([, s]) => !!document.querySelector(s)?.closest(o)).map(([id, s]) => `${id}: ${s}`),
    [flagged, OURS] as const
  );
  expect(ours).toEqual([]);
  // The rules ran on our elements: axe saw the panel's and the monitor's pass, not skipped them.
  const passed = found.passes.flatMap(rule => rule.nodes.map(node => node.target.join(' ')));
  const passedIn = await page.evaluate(
    ([all, panelId]) =>
      ['#' + panelId, '.jupyter-gpumem-monitor'].map(o => all.filter(s => !!document.querySelector(s)?.closest(o)).length),
    [passed, PANEL_ID] as const
  );
  expect(passedIn.every(n => n > 0)).toBe(true);
  // The Fraction field has its name when focused, as a screen reader announces it.
  await panel.locator('input[name="fraction"]').focus();
  await expect(panel.getByRole('textbox', { name: 'Fraction' })).toBeFocused();
});
