// Used by tests/test_browser_revalidate.py: in headless Chromium, on a page of the test server
// (same origin, jupyter_server's login page, whose CSP allows fetch), GET /devices three times
// the way labextension/src/api.ts does (fetch with cache: 'no-cache' and the token header) and
// print what the page saw: [status, number of devices] per request.
const { chromium } = require(process.env.GPUMEM_PLAYWRIGHT);
(async () => {
  const [base, token] = process.argv.slice(2);
  const browser = await chromium.launch({ executablePath: process.env.GPUMEM_CHROMIUM, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage();
    await page.goto(`${base}login`);
    const seen = await page.evaluate(async ([base, token]) => {
      const out = [];
      for (let i = 0; i < 3; i++) {
        const r = await fetch(`${base}jupyter-gpumem/api/devices`, {
          cache: 'no-cache',
          headers: { Authorization: `token ${token}` }
        });
        out.push([r.status, (await r.json()).devices.length]);
      }
      return out;
    }, [base, token]);
    console.log(JSON.stringify(seen));
  } finally {
    await browser.close();
  }
})();
