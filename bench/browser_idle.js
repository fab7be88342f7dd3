/**
 * The browser half of bench_browser_idle.py: opens JupyterLab in headless chromium, runs a
 * notebook that starts the live monitor(s), opens the GPU memory panel, lets it settle, then
 * counts the kernel's status changes to "busy" for a given number of seconds.
 *
 * Prints "READY" when the idle span starts and "DONE <busy count>" when it ends; the Python
 * side reads the kernel's CPU time between the two. Uses the ui-tests' playwright and
 * Debian's chromium.
 *
 *   node bench/browser_idle.js <lab url with token> <notebook path> <seconds> <settle seconds>
 */
const path = require('path');
const { chromium } = require(path.join(__dirname, '..', 'ui-tests', 'node_modules', 'playwright'));

async function main() {
  const [url, notebook, seconds, settle] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.GPUMEM_CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.goto(url);
    await page.waitForFunction(() => (window).jupyterapp && (window).jupyterapp.shell, null, { timeout: 120000 });
    await page.evaluate(() => (window).jupyterapp.restored);
    await page.evaluate(p => (window).jupyterapp.commands.execute('docmanager:open', { path: p }), notebook);
    const kernelIdle = () =>
      page.waitForFunction(
        () => {
          const k = (window).jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;
          return k && k.status === 'idle' && k.connectionStatus === 'connected';
        },
        null,
        { timeout: 120000 }
      );
    await kernelIdle();
    await page.evaluate(() => (window).jupyterapp.commands.execute('notebook:run-all-cells'));
    await page.locator('.jupyter-gpumem-monitor .js-plotly-plot').first().waitFor({ timeout: 120000 });
    await page.evaluate(() => (window).jupyterapp.shell.activateById('jupyter-gpumem-panel'));
    await kernelIdle();
    await page.waitForTimeout(Number(settle) * 1000);
    await page.evaluate(() => {
      const w = window;
      const kernel = w.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
      w.__busy = 0;
      kernel.statusChanged.connect((_, status) => {
        if (status === 'busy') {
          w.__busy += 1;
        }
      });
    });
    // Points drawn, to show the monitor kept drawing through the idle span.
    const points = () =>
      page.evaluate(() =>
        Array.from(document.querySelectorAll('.jupyter-gpumem-monitor .js-plotly-plot')).reduce(
          (n, gd) => n + ((gd.data && gd.data[0] && gd.data[0].x.length) || 0),
          0
        )
      );
    const before = await points();
    console.log('READY');
    await page.waitForTimeout(Number(seconds) * 1000);
    const busy = await page.evaluate(() => (window).__busy);
    console.log(`DONE ${busy} ${(await points()) - before}`);
    await page.evaluate(() => (window).jupyterapp.serviceManager.sessions.shutdownAll());
  } finally {
    await browser.close();
  }
}

main().catch(err => {
  console.error(err);
  process.exit(1);
});
