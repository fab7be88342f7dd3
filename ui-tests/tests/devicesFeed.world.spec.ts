/**
 * How the panel gets the GPUs on the fake three-GPU world (synthetic): pushed on the server's
 * socket, with no request per interval; and by polling /devices where no socket can be opened.
 */
import { expect, test } from '@jupyterlab/galata';
import { Page } from '@playwright/test';

import { NO_KERNEL_TRACKER, openNotebook, openPanel } from './gpumem';
import { runCell } from './panelSteps';

test.use({ autoGoto: true, ...NO_KERNEL_TRACKER });

const DEVICES = /\/jupyter-gpumem\/api\/devices(\?|$)/;
const SOCKET = /\/jupyter-gpumem\/api\/devices\/ws(\?|$)/;

/** Counts what the page asks of /devices and the sockets it opens to /devices/ws, from now on. */
function countRequests(page: Page): { gets: number; sockets: number } {
  const seen = { gets: 0, sockets: 0 };
  page.on('request', r => {
    if (r.method() === 'GET' && DEVICES.test(r.url())) {
      seen.gets += 1;
    }
  });
  page.on('websocket', ws => {
    if (SOCKET.test(ws.url())) {
      seen.sockets += 1;
    }
  });
  return seen;
}

/** The server's own counts (GET /jupyter-gpumem/api/config): /devices answers and open sockets. */
async function serverCounts(page: Page): Promise<{ answers: number; sockets: number }> {
  const config = await (await page.request.get('/jupyter-gpumem/api/config')).json();
  const a = config.devices_answers;
  return { answers: a.full + a.not_modified, sockets: config.devices_sockets };
}

test('with the panel open the page keeps one socket, asks /devices nothing, and readings still change', async ({ page, tmpPath }) => {
  const seen = countRequests(page);
  await openNotebook(page, tmpPath, 'world_kernel.ipynb');
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(3, { timeout: 30000 });
  // Earlier pages' sockets close with their pages.
  await expect.poll(async () => (await serverCounts(page)).sockets, { timeout: 10000 }).toBe(1);
  const answers = (await serverCounts(page)).answers;
  const { gets, sockets } = seen;

  // The cell puts this kernel on fake GPU 1 with 6 GiB: the next reading differs and is pushed.
  const status = page.locator('#jp-main-statusbar .jp-GpuMem-statusText');
  await expect(status).not.toHaveText('GPU 1 · 16.0/40.0 GiB · this notebook 6.00 GiB');
  await runCell(page, 0);
  await expect(status).toHaveText('GPU 1 · 16.0/40.0 GiB · this notebook 6.00 GiB');
  await expect(panel.locator('.jp-GpuMem-thisKernel')).toContainText('6.00 GiB');

  // Three intervals of the panel's 2 s poll, which asked /devices three times.
  await page.waitForTimeout(6500);
  expect(seen.gets - gets).toBe(0);
  expect(seen.sockets - sockets).toBe(0);
  const after = await serverCounts(page);
  expect(after.answers - answers).toBe(0);
  expect(after.sockets).toBe(1);
});

test('the socket closes while nothing shows the readings, and opens again with the panel', async ({ page }) => {
  // No notebook: the status bar item is hidden, so the panel alone watches.
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(3, { timeout: 30000 });
  await expect.poll(async () => (await serverCounts(page)).sockets, { timeout: 10000 }).toBe(1);
  await page.sidebar.close('left');
  await expect.poll(async () => (await serverCounts(page)).sockets, { timeout: 10000 }).toBe(0);
  await openPanel(page);
  await expect.poll(async () => (await serverCounts(page)).sockets, { timeout: 10000 }).toBe(1);
  await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(3);
});

test.describe('where no socket can be opened', () => {
  test.use({ autoGoto: false });

  test('the panel polls /devices and shows the GPUs, with nothing said about it', async ({ page }) => {
    // Every /devices/ws upgrade is answered by a close before any answer, as a proxy that
    // blocks websockets does; an older server without the route fails the upgrade with 404.
    let tries = 0;
    await page.routeWebSocket(SOCKET, ws => {
      tries += 1;
      ws.close();
    });
    const seen = countRequests(page);
    await page.goto();
    const panel = await openPanel(page);
    await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(3, { timeout: 30000 });
    const gets = seen.gets;
    await page.waitForTimeout(4500);
    expect(seen.gets - gets).toBeGreaterThanOrEqual(2); // every 2 s
    await expect(panel.locator('.jp-GpuMem-card')).toHaveCount(3);
    await expect(panel).not.toContainText(/unreachable|failed|cannot be reached/);
    // One try at a socket, then polling for the page's life.
    expect(tries).toBe(1);
  });
});
